"""The build step's patch and cache, without building (the sessions build Horovod for real)."""

import pytest

pytest.importorskip("trainkit_horovod", reason="trainkit-horovod runs in the sessions of nox -t horovod")
from trainkit_horovod import build  # noqa: E402


STRUCT = "  struct {{\n    {}\n    {}\n  }} ecmd;\n"
REQ, DATA = "struct ethtool_link_settings req;", "__u32 link_mode_data[link_mode_data_nwords];"
GLOO_0_28_0, GLOO_0_28_1 = STRUCT.format(REQ, DATA), STRUCT.format(DATA, REQ)


RELEASE_FLAGS = 'string(REPLACE "-O2" "-O3" CMAKE_CXX_FLAGS_RELWITHDEBINFO "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")\n'


def test_patch_raises_both_cmake_files_to_cxx17_drops_debug_info_and_backports_the_gloo_fix(tmp_path):
    for name in [*build.PATCHES, *build.BACKPORTS]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("project(x)\nset(CMAKE_CXX_STANDARD 14)\n")
    (tmp_path / "CMakeLists.txt").write_text("project(x)\nset(CMAKE_CXX_STANDARD 14)\n" + RELEASE_FLAGS)
    (tmp_path / next(iter(build.BACKPORTS))).write_text(GLOO_0_28_0)
    build.patch(tmp_path)
    assert (tmp_path / "horovod/torch/CMakeLists.txt").read_text() == "project(x)\nset(CMAKE_CXX_STANDARD 17)\n"
    assert (tmp_path / "CMakeLists.txt").read_text() == (
        "project(x)\nset(CMAKE_CXX_STANDARD 17)\n" + RELEASE_FLAGS.replace('"-O2" "-O3"', '"-O2 -g" "-O3"'))
    assert (tmp_path / next(iter(build.BACKPORTS))).read_text() == GLOO_0_28_1
    with pytest.raises(SystemExit, match="expected one line matching"):
        build.patch(tmp_path)  # an unknown sdist layout fails loudly instead of building unpatched


def test_a_cached_wheel_is_reused_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINKIT_HOROVOD_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "build", lambda *a: pytest.fail("built although a wheel was cached"))
    python = f"cp{build.sys.version_info.major}{build.sys.version_info.minor}"
    key = tmp_path / f"horovod-0.28.1-torch-{build._torch_version()}-{python}"
    key.mkdir()
    (key / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl").touch()
    assert build.ensure_wheel("0.28.1") == key / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"


@pytest.mark.parametrize("pin", ["horovod", "horovod>=0.28", "torch==2.13.0", "horovod==latest"])
def test_bad_pin_names_the_expected_form(pin):
    with pytest.raises(SystemExit, match="expected 'horovod==<version>'"):
        build._parse(pin)


def test_a_second_prepare_waits_for_the_first_build_and_reuses_its_wheel(tmp_path, monkeypatch):
    """While one environment builds (holding the entry's lock), another waits, then installs that wheel."""
    import fcntl
    import threading

    monkeypatch.setenv("TRAINKIT_HOROVOD_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(build, "build", lambda *a: built.append(a))
    python = f"cp{build.sys.version_info.major}{build.sys.version_info.minor}"
    key = tmp_path / f"horovod-0.28.1-torch-{build._torch_version()}-{python}"
    key.mkdir()
    found = []
    with open(key / ".lock", "w") as first_build:
        fcntl.flock(first_build, fcntl.LOCK_EX)
        second = threading.Thread(target=lambda: found.append(build.ensure_wheel("0.28.1")))
        second.start()
        second.join(timeout=1)
        assert second.is_alive() and not built  # waiting on the first build, not building
        wheel = key / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
        wheel.touch()
    second.join(timeout=60)
    assert found == [wheel] and not built
