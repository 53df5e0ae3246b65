"""Run inside a fresh environment holding one installed distribution (``nox -s packaging``):
``python packaging_check.py DIST [PLUGIN...]``.

Fails unless every module of DIST imports with only its declared dependencies present (extras'
modules aside), each named plugin's entry point loads, and a 2-worker run works by backend name
(core alone: a plain DataParallelTrainer).
"""

import importlib
import importlib.metadata as md
import json
import os
import subprocess
import sys

EXTRAS_ONLY = ("trainkit.testing",)  # modules that need an extra (trainkit-core[testing])


def modules_of(dist: str) -> list[str]:
    names = set()
    for file in md.distribution(dist).files or []:
        parts = file.parts
        if file.suffix == ".py" and not parts[0].endswith((".dist-info", ".data")):
            module = ".".join(parts)[: -len(".py")].removesuffix(".__init__")
            if not module.startswith(EXTRAS_ONLY):
                names.add(module)
    return sorted(names)


def train_fn():
    import trainkit

    ctx = trainkit.get_context()
    trainkit.report({"world": ctx.get_world_size()})


def main(dist: str, *plugins: str) -> None:
    modules = modules_of(dist)
    for module in modules:
        importlib.import_module(module)
    print(f"{dist}: {len(modules)} modules import with only declared dependencies")

    cli = os.path.join(os.path.dirname(sys.executable), "trainkit")  # the console script of this environment
    listed = json.loads(subprocess.run([cli, "plugins", "--json"], check=True, capture_output=True, text=True).stdout)
    status = {p["name"]: p["status"] for p in listed}
    for plugin in plugins:
        assert status.get(plugin) == "loaded", f"plugin {plugin!r} did not load: {listed}"

    import trainkit

    for backend in plugins or (None,):
        scaling = trainkit.ScalingConfig(num_workers=2)
        run = trainkit.RunConfig(storage_path="/tmp/trainkit-packaging", verbose=0)
        trainer = (trainkit.Trainer(train_fn, backend=backend, scaling_config=scaling, run_config=run) if backend
                   else trainkit.DataParallelTrainer(train_fn, scaling_config=scaling, run_config=run))
        assert trainer.fit().metrics == {"world": 2}
        print(f"{dist}: a 2-worker run with backend {backend or '(none)'} works")


if __name__ == "__main__":
    main(*sys.argv[1:])
