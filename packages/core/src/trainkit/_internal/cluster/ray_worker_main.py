"""The Python worker of the embedded cluster: Ray's own ``default_worker.py``, after one change.

Ray gives every process a serializer for pydantic's ``ModelField`` (FastAPI's pydantic-v1
compatibility type) and imports pydantic to do so: 0.2-0.3 s of CPU in the driver and in every
worker, before the first task runs, where nothing sends such an object. ``lazy_pydantic`` keeps
Ray's behaviour in a process that has imported pydantic already and skips it elsewhere; every
other serializer is registered as Ray does. Run as a script (``ray_params.worker_path``), this
file imports nothing of trainkit.
"""

import importlib.util
import os
import runpy
import sys
import types

_PYDANTIC_COMPAT = ("ray._common.pydantic_compat", "ray._private.pydantic_compat")  # newer Ray, older Ray


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def lazy_pydantic() -> None:
    import ray.util.serialization_addons as addons

    ray_apply = addons.apply
    if getattr(ray_apply, "trainkit_lazy_pydantic", False):
        return
    compat = next((name for name in _PYDANTIC_COMPAT if _found(name)), None)
    if compat is None:
        return
    no_pydantic = types.ModuleType(compat)
    no_pydantic.register_pydantic_serializers = lambda context: None

    def apply(context) -> None:
        if "pydantic" in sys.modules or compat in sys.modules:
            return ray_apply(context)
        sys.modules[compat] = no_pydantic  # only while Ray's apply imports it; later imports get Ray's
        try:
            return ray_apply(context)
        finally:
            del sys.modules[compat]

    apply.trainkit_lazy_pydantic = True
    addons.apply = apply


if __name__ == "__main__":
    lazy_pydantic()
    import ray._private.workers

    sys.argv[0] = os.path.join(os.path.dirname(ray._private.workers.__file__), "default_worker.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
