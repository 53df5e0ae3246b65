"""A rank's side of a run: its Ray actor, the worker group around it, its session and its report path."""
