"""Build and install Horovod for this environment: ``python -m trainkit_horovod.build [horovod==0.28.1]``.

pip cannot build Horovod 0.28.1 (its last release) against torch >= 2.1: its CMake files ask for
C++14 where torch's headers need C++17. This takes the sdist from the package index, raises both
CMake files to C++17 (the torch bindings, and the top-level build so that the bundled gloo links),
applies fixes a later release ships where an older sdist lacks them (0.28.0's gloo), builds a wheel
with torch and gloo (no MPI, no TensorFlow, no MXNet) and installs it. Built wheels
are cached, keyed by the Horovod, torch and Python versions, in ``$TRAINKIT_HOROVOD_CACHE`` (default
``~/.cache/trainkit/horovod``); a cached wheel installs in seconds, a build takes minutes.

Example::

    pip install trainkit-horovod torch
    python -m trainkit_horovod.build          # horovod==0.28.1 into this environment
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DEFAULT = "horovod==0.28.1"
BUILD_ENV = {"HOROVOD_WITH_PYTORCH": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
             "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1"}
BUILD_DEPS = ["setuptools", "wheel", "packaging"]  # setup.py's own imports (the build is not isolated)
# file -> (pattern, replacement): C++17 wherever the sdist asks for C++14
PATCHES = {
    "CMakeLists.txt": (r"set\(CMAKE_CXX_STANDARD 14\)", "set(CMAKE_CXX_STANDARD 17)"),
    "horovod/torch/CMakeLists.txt": (r"set\(CMAKE_CXX_STANDARD 14\)", "set(CMAKE_CXX_STANDARD 17)"),
}
# Fixes a later release ships, applied where an older sdist lacks them: 0.28.0's bundled gloo does not
# compile against current kernel headers (a flexible array member not at the end of a struct); 0.28.1
# moves it first.
BACKPORTS = {
    "third_party/gloo/gloo/common/linux.cc":
        (r"( +struct ethtool_link_settings req;\n)( +__u32 link_mode_data\[.*?\];\n)", r"\2\1"),
}

# Horovod builds RelWithDebInfo (-O3 -g): the debug info of every file that includes torch's headers
# is most of the build's time. The wheel pip would install carries none either.
NO_DEBUG_INFO = {
    "CMakeLists.txt": (r'string\(REPLACE "-O2" "-O3" CMAKE_CXX_FLAGS_RELWITHDEBINFO',
                       'string(REPLACE "-O2 -g" "-O3" CMAKE_CXX_FLAGS_RELWITHDEBINFO'),
}


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trainkit" / "horovod"
    return Path(os.environ.get("TRAINKIT_HOROVOD_CACHE", default))


def _parse(pin: str) -> str:
    match = re.fullmatch(r"horovod==(\d+(?:\.\d+)*)", pin.strip())
    if not match:
        raise SystemExit(f"pin={pin!r} is invalid: expected 'horovod==<version>', e.g. {DEFAULT!r}")
    return match.group(1)


def _torch_version() -> str:
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001 - PackageNotFoundError, or a broken install
        raise SystemExit("torch is not installed in this environment: install it first "
                         "(the CPU build, e.g. pip install torch==2.13.0), then run this again") from None


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def patch(source: Path) -> None:
    """Raise the C++ standard of an unpacked Horovod sdist to C++17 (fails if a file lacks the line),
    apply the backports it lacks and build without debug info."""
    required = [(name, *change, True) for name, change in PATCHES.items()]
    optional = [(name, *change, False) for changes in (BACKPORTS, NO_DEBUG_INFO) for name, change in changes.items()]
    for name, pattern, replacement, must in required + optional:
        path = source / name
        text, count = re.subn(pattern, replacement, path.read_text())
        if count != 1 and must:
            raise SystemExit(f"{path}: expected one line matching {pattern!r}, found {count}; "
                             "this Horovod version is not one this build step knows")
        path.write_text(text)


def build(version: str, into: Path) -> Path:
    """Download the sdist of ``horovod==version``, patch it and build a wheel into ``into``."""
    _pip("install", "-q", *BUILD_DEPS)
    with tempfile.TemporaryDirectory(prefix="trainkit-horovod-") as tmp:
        _pip("download", "-q", "--no-deps", "--no-binary", ":all:", f"horovod=={version}", "-d", tmp)
        (sdist,) = glob.glob(os.path.join(tmp, f"horovod-{version}.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))  # 3.10.12+
        source = Path(tmp) / f"horovod-{version}"
        patch(source)
        wheels = Path(tmp) / "wheel"
        _pip("wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-w", str(wheels), str(source),
             env={**os.environ, **BUILD_ENV})
        (wheel,) = wheels.glob("horovod-*.whl")
        into.mkdir(parents=True, exist_ok=True)
        partial = into / f".{wheel.name}.partial"
        shutil.copy(wheel, partial)
        return partial.replace(into / wheel.name)  # atomic: a cache entry is whole or absent


def ensure_wheel(version: str) -> Path:
    """The cached wheel of ``horovod==version`` for this torch and Python, built on a miss."""
    key = f"horovod-{version}-torch-{_torch_version()}-cp{sys.version_info.major}{sys.version_info.minor}"
    entry = cache_dir() / key
    entry.mkdir(parents=True, exist_ok=True)
    # one build per entry: a second environment being prepared at the same time (CI's sessions run
    # side by side) waits for the first's wheel instead of building it again
    with open(entry / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(entry.glob("horovod-*.whl"))
        if found:
            print(f"trainkit_horovod.build: cached {found[0]}", flush=True)
            return found[0]
        print(f"trainkit_horovod.build: building horovod {version} for torch {_torch_version()} "
              f"(a few minutes) into {entry}", flush=True)
        return build(version, entry)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainkit_horovod.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("pin", nargs="?", default=DEFAULT, help=f"the Horovod to install (default {DEFAULT})")
    parser.add_argument("--wheel-only", action="store_true", help="build or find the wheel and print its path")
    args = parser.parse_args(argv)
    wheel = ensure_wheel(_parse(args.pin))
    if args.wheel_only:
        print(wheel)
    else:
        _pip("install", "-q", str(wheel))


if __name__ == "__main__":
    main()
