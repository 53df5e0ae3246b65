"""One record of the classes cloudpickle sent by value, for Ray's vendored cloudpickle and the
standalone one. A class defined in the user's script travels by value with an id; a process that
unpickles it keeps the id, so the object sent back is of the sender's very class. A ``fit()``
handed to the warm cluster's standby driver (trainkit-warm) pickles the run with the standalone
cloudpickle (its process never imports Ray) while Ray pickles what the workers send back: with two records, a
dataclass returned by the training function would come back as a copy of the user's class, not
the class (``isinstance`` False)."""

from __future__ import annotations

_TRACKERS = ("_DYNAMIC_CLASS_TRACKER_BY_CLASS", "_DYNAMIC_CLASS_TRACKER_BY_ID", "_DYNAMIC_CLASS_TRACKER_LOCK")


def share_class_ids() -> None:
    """Make Ray's cloudpickle use the standalone cloudpickle's record (both kept). Ray is imported."""
    try:
        from cloudpickle import cloudpickle as standalone
        from ray.cloudpickle import cloudpickle as vendored
    except ImportError:
        return
    if not all(hasattr(module, name) for module in (standalone, vendored) for name in _TRACKERS):
        return  # a cloudpickle that keeps them otherwise: copies, as before
    with standalone._DYNAMIC_CLASS_TRACKER_LOCK, vendored._DYNAMIC_CLASS_TRACKER_LOCK:
        for name in _TRACKERS[:2]:
            ours, theirs = getattr(standalone, name), getattr(vendored, name)
            if ours is not theirs:
                ours.update(theirs)
                setattr(vendored, name, ours)
        vendored._DYNAMIC_CLASS_TRACKER_LOCK = standalone._DYNAMIC_CLASS_TRACKER_LOCK
