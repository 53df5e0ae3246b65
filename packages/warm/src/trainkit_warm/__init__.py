"""trainkit-warm: the warm local cluster, ``trainkit up`` / ``trainkit down`` (docs/cli.md).

A Ray cluster on loopback that outlives one driver: its keeper (``keeper.py``) starts and records it
(``record.py``), keeps spare worker processes (``spare_workers.py``) and a standby driver a
``fit()`` hands its run to (``handoff.py``); a driver attaches to it (``attach.py``). Core finds it
through the entry-point group ``trainkit.runtimes`` (``_plugin.py``); importing this package imports
none of it.
"""
