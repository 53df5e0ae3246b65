"""What the commands run: ``trainkit launch`` (its backend and its command line), ``migrate``, ``runs``."""
