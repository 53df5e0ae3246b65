"""The driver's side of a run: the controller, its attempts, what it hears from the ranks and prints."""
