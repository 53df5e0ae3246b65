"""Every code block in README.md and docs/ runs, so the docs cannot rot.

A page's blocks run in order in a fresh directory with its own ``HOME`` (runs land in its
``~/trainkit_results``): ``python`` blocks share one namespace, ``bash`` blocks run with ``-euo
pipefail``, ``toml`` blocks must parse, ``text`` blocks (output, trees) are shown as written. A
``pip install`` line is not run (the packages are not published from here): every requirement on it
must name one of this repository's distributions or extras. README's ``bash`` blocks are the two
set-up commands; CI runs them itself. README's ``python`` blocks run in
test_readme_use_example_resumes_when_run_again (twice, a re-run that resumes), not here again. A
page a plugin lists in ``[tool.trainkit] docs-pages`` runs where that plugin is installed (its own
nox sessions, when it keeps out of the shared environment).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from trainkit.testing import subprocesses

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.S | re.M)
LANGUAGES = {"python", "bash", "toml", "text"}


def blocks(page: Path) -> list[tuple[str, int, str]]:
    text = page.read_text()
    return [(m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)) for m in FENCE.finditer(text)]


def page_owners() -> dict[str, str]:
    """docs page name -> the plugin module that page needs (``[tool.trainkit] docs-pages``)."""
    owners = {}
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        for page in tomllib.loads(pyproject.read_text()).get("tool", {}).get("trainkit", {}).get("docs-pages", []):
            owners[page] = f"trainkit_{pyproject.parent.name}"
    return owners


def distributions() -> dict[str, set[str]]:
    """This repository's distributions and their extras."""
    found = {}
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        found[project["name"]] = set(project.get("optional-dependencies", {}))
    return found


def frameworks() -> set[str]:
    """What this repository's distributions depend on outside it (torch, jax, ...): a page may pin one."""
    found = set()
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        found |= {Requirement(r).name for r in tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])}
    return found - set(distributions())


def example_deps() -> set[str]:
    """What the examples import beyond trainkit and its frameworks (scikit-learn's data sets): noxfile's
    ``TEST_DEPS``, which CI installs for the pages."""
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    deps = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "TEST_DEPS" for t in node.targets))
    return {Requirement(ast.literal_eval(d)).name for d in deps.elts}


def check_pip_install(line: str) -> None:
    """Every requirement names this repository's distributions and extras, as published or as a clone's
    folder (``-e packages/core[plot]``), pins a framework they depend on (``torch==2.13.0``), or is a
    dependency of the examples CI installs (``scikit-learn``)."""
    known = distributions()
    args = iter(shlex.split(line.split("#", 1)[0])[2:])
    for arg in args:
        if arg in ("--index-url", "--extra-index-url", "-i"):
            next(args)  # the option's value
            continue
        if arg == "-e":
            folder, extras = re.fullmatch(r"([^\[]+)(?:\[(.*)\])?", next(args)).groups()
            pyproject = ROOT / folder / "pyproject.toml"
            assert folder.startswith("packages/") and pyproject.exists(), f"{line!r}: {folder} is no package folder here"
            arg = tomllib.loads(pyproject.read_text())["project"]["name"] + (f"[{extras}]" if extras else "")
        elif arg.startswith("-"):
            continue
        requirement = Requirement(arg)
        if requirement.name in frameworks() and str(requirement.specifier).startswith("=="):
            continue
        if requirement.name in example_deps():
            continue
        assert requirement.name in known, f"{line!r}: {requirement.name} is not a distribution of this repository"
        unknown = requirement.extras - known[requirement.name]
        assert not unknown, f"{line!r}: {requirement.name} has no extra(s) {sorted(unknown)}"


RUNNER = textwrap.dedent('''
    import json, subprocess, sys
    namespace = {"__name__": "__main__"}
    for language, page, line, source in json.load(open(sys.argv[1])):
        where = f"{page}:{line}"
        print(f"--- {where} ({language})", flush=True)
        if language == "python":
            exec(compile("\\n" * (line - 1) + source, page, "exec"), namespace)
        else:
            if subprocess.run(["bash", "-euo", "pipefail", "-c", source]).returncode:
                sys.exit(f"the bash block at {where} failed")
''')


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_block_runs(page, tmp_path):
    import importlib.util
    import json

    owner = page_owners().get(page.name)
    if owner and importlib.util.find_spec(owner) is None:
        pytest.skip(f"{page.name} runs in the sessions that install {owner}")
    runnable = []
    for language, line, source in blocks(page):
        assert language in LANGUAGES, f"{page.name}:{line}: give the block one of the languages {sorted(LANGUAGES)}"
        if language == "toml":
            tomllib.loads(source)
        elif language == "bash" and page.name != "README.md":
            commands = [c for c in source.splitlines() if c.strip() and not c.startswith("#")]
            for command in commands:
                if command.startswith("pip install"):
                    check_pip_install(command)
            script = "\n".join(c for c in commands if not c.startswith("pip install"))
            if script:
                runnable.append(("bash", page.name, line, script))
        elif language == "python" and page.name != "README.md":  # README's example runs (twice) below
            runnable.append(("python", page.name, line, source))
    if not runnable:
        return
    (tmp_path / "blocks.json").write_text(json.dumps(runnable))
    (tmp_path / "runner.py").write_text(RUNNER)
    # TMPDIR of its own (short: Ray's socket paths live under it): the page's private dir, so a warm
    # cluster its blocks start (`trainkit up`, docs/cli.md) is seen by no other test, and stopped below
    private_tmp = tempfile.mkdtemp(prefix="tkd", dir="/tmp")
    env = {**os.environ, "HOME": str(tmp_path), "TRAINKIT_VERBOSE": "0", "TMPDIR": private_tmp,
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}
    env.pop("TRAINKIT_STORAGE_PATH", None)
    work = tmp_path / "work"
    work.mkdir()
    try:
        done = subprocesses.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
                                cwd=work, env=env, capture_output=True, text=True, timeout=600)
    finally:
        if "trainkit up" in page.read_text():  # a warm cluster its blocks left up: never past the test
            subprocesses.run([sys.executable, "-m", "trainkit.cli", "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(private_tmp, ignore_errors=True)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "getting-started.md"], ids=lambda p: p.name)
def test_the_newcomer_pages_give_the_install_from_a_clone(page):
    """Nothing is published on the package index yet: next to the published install, the pages a
    newcomer reads first give the one from a clone, with the tested torch pin, and it checks."""
    text = " ".join(page.read_text().split())  # prose wraps
    assert "pip install trainkit-torch 'trainkit-core[plot]'" in text  # once published
    clone = "pip install -e 'packages/core[plot]' -e packages/torch torch==2.13.0"
    assert clone in text
    check_pip_install(clone)


def test_readme_setup_commands_are_what_ci_runs():
    commands = [source.strip() for language, _, source in blocks(ROOT / "README.md") if language == "bash"]
    assert commands == ["pip install 'nox[uv]' && nox -s quickstart", "pip install 'nox[uv]' && nox -t ci"]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_readme_use_example_resumes_when_run_again(tmp_path):
    """The README says a re-run of the same run name resumes: run its example twice, as a user would;
    the second run trains no epoch again."""
    import json

    source = "\n".join(s for language, _, s in blocks(ROOT / "README.md") if language == "python")
    script = tmp_path / "use.py"
    script.write_text(f"{source}\n{source}")  # run twice (one Ray start)
    env = {**os.environ, "HOME": str(tmp_path), "TRAINKIT_VERBOSE": "0"}
    env.pop("TRAINKIT_STORAGE_PATH", None)
    done = subprocesses.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    shown = subprocesses.run([sys.executable, "-m", "trainkit.cli", "show", "my-run", "--json"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert json.loads(shown)["reports"] == 3  # 3 epochs in all: the re-run resumed after the last one
