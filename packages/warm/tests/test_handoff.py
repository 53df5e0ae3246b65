"""The pieces of a fit() handed to the warm cluster's standby driver (``handoff.py``) that need
no cluster: what travels and what it becomes on the other side. The handoff itself, with real
processes, is in ``test_warm_cluster.py``."""

from __future__ import annotations

import pickle
import sys
import warnings

from trainkit_warm import handoff


def test_the_users_warning_filters_travel_without_importing_their_categories_modules():
    """A filter on a category of a module the spare has not loaded (torch's) is dropped, not
    imported (unpickling it imported torch in the spare: 1.5 s before the run started)."""
    filters = [("error", None, ("builtins", "DeprecationWarning"), None, 0),
               ("ignore", None, ("trainkit_no_such_module.sub", "Noisy"), None, 0),
               ("always", None, ("warnings", "WarningMessage"), None, 3),  # not a category: dropped
               ("default", None, ("trainkit.errors", "TrainkitWarning"), None, 0)]
    before = set(sys.modules)
    got = handoff._warning_filters(pickle.loads(pickle.dumps(filters)))
    from trainkit.errors import TrainkitWarning

    assert got == [("error", None, DeprecationWarning, None, 0), ("default", None, TrainkitWarning, None, 0)]
    assert set(sys.modules) == before
    with warnings.catch_warnings():
        warnings.filters[:] = got
        warnings._filters_mutated()
        try:
            warnings.warn("old", DeprecationWarning)
        except DeprecationWarning:
            pass
        else:
            raise AssertionError("the filter did not apply")


def test_an_error_comes_back_with_its_cause():
    """``trainkit launch`` reads a script's exit status from the cause of the run's error."""
    from trainkit.errors import ScriptExitError, WorkerGroupError

    try:
        try:
            raise ScriptExitError("train.py", 5)
        except ScriptExitError as exc:
            raise WorkerGroupError("rank 1 raised", {1: exc}, rank=1) from exc
    except WorkerGroupError as exc:
        error = exc
    copy = pickle.loads(handoff._dumps(error))
    assert type(copy) is WorkerGroupError and copy.rank == 1 and str(copy) == "rank 1 raised"
    assert type(copy.__cause__) is ScriptExitError and copy.__cause__.returncode == 5
