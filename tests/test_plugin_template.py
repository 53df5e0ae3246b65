"""The plugin template stays a template of the third-party fixture plugin: same files, the
placeholders filled in, every TODO done. (The fixture's own tests run in ``nox -s thirdparty``.)"""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
TEMPLATE = ROOT / "templates" / "plugin"
FIXTURE = ROOT / "tests" / "fixtures" / "thirdparty_plugin"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_fixture_plugin_is_the_template_filled_in():
    template = {name.replace("myframework", "npcomm") for name in _files(TEMPLATE)}
    fixture = _files(FIXTURE)
    assert template <= fixture, f"template files missing from the fixture: {sorted(template - fixture)}"
    for name in fixture:
        text = (FIXTURE / name).read_text()
        assert "TODO" not in text and "myframework" not in text.lower(), name


def test_template_python_parses_and_marks_what_to_fill_in():
    for name in _files(TEMPLATE):
        if name.endswith(".py"):
            ast.parse((TEMPLATE / name).read_text(), filename=name)
    todos = sum((TEMPLATE / name).read_text().count("TODO") for name in _files(TEMPLATE))
    assert todos >= 5


def test_renaming_the_template_leaves_the_framework_name_a_todo():
    """The documented sed replaces the plugin's name; the framework's distribution is another name."""
    text = (TEMPLATE / "src" / "trainkit_myframework" / "_plugin.py").read_text()
    renamed = text.replace("myframework", "foo").replace("MyFramework", "Foo")
    (line,) = [line for line in renamed.splitlines() if line.startswith("FRAMEWORK =")]
    assert "TODO" in line and '"foo"' not in line
