"""trainkit internals: no stability promise; import from ``trainkit`` instead."""
