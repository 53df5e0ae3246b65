"""``trainkit migrate``: rewrites a Ray Train script to trainkit on its syntax tree (``ast`` with node
positions), by the rules in ``migrate_rules``. Only the imports and the Ray Train names change: every
other byte of the file (comments, formatting) stays as it was."""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from trainkit._internal.tools.migrate_rules import MODULES, rule_module, trainkit_module, trainkit_name, tune_path


@dataclass(frozen=True)
class Unrewritten:
    """Something ``migrate`` left as it was, for a person to change."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Migration:
    path: str
    source: str
    migrated: str
    unrewritten: list[Unrewritten] = field(default_factory=list)

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.source.splitlines(keepends=True),
                                            self.migrated.splitlines(keepends=True),
                                            f"a/{self.path.lstrip('/')}", f"b/{self.path.lstrip('/')}"))


def _ray_module(path: str) -> str | None:
    """The longest Ray module of the rules that ``path`` (dotted) starts with."""
    parts = path.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in MODULES), None)


_MISSING = object()


def _has(module: str, name: str) -> bool | None:
    """Whether trainkit's ``module`` has ``name``; None where that module is not installed here. A
    private name (``_TorchBackend``) is never a counterpart, installed or not."""
    if name.startswith("_"):
        return False
    try:
        target = importlib.import_module(module)
    except ImportError:
        return None
    # __all__ first: a lazy export (trainkit_tf.ReportCallback imports TensorFlow) is found unloaded
    if name in getattr(target, "__all__", ()) or name in vars(target):
        return True
    try:  # a submodule, e.g. trainkit.tune
        if importlib.util.find_spec(f"{module}.{name}") is not None:
            return True
    except (ImportError, ValueError):
        pass
    return getattr(target, name, _MISSING) is not _MISSING


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return [node.id, *reversed(attrs)] if isinstance(node, ast.Name) else None


class _Rewriter(ast.NodeVisitor):
    def __init__(self, source: str, path: str):
        self.source, self.path = source, path
        self.lines = source.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line.encode()))
        self.data = source.encode()
        self.edits: list[tuple[int, int, str]] = []
        self.unrewritten: list[Unrewritten] = []
        self.bindings: dict[str, list[tuple[str, ast.stmt]]] = {}  # local name -> (Ray dotted path, its import)
        self.scopes: dict[ast.stmt, ast.AST] = {}  # each Ray import -> the function or module it is in
        self.needs: dict[ast.stmt, list[str]] = {}  # import statement -> trainkit modules imported with it
        self.kept: set[ast.stmt] = set()  # Ray imports some use still needs as they are
        self.imports: list[ast.stmt] = []
        self.submodules: dict[str, str] = {}  # imported submodule of a Ray Train module -> that module

    def canonical(self, path: str) -> str:
        """``path`` by the Ray module of the rules it is in (``ray.train.torch.torch_trainer.TorchTrainer``:
        ``ray.train.torch.TorchTrainer``) and by Tune's public names (``ray.tune.tuner.Tuner``: ``ray.tune.Tuner``)."""
        for module in sorted(self.submodules, key=len, reverse=True):
            if path == module or path.startswith(module + "."):
                path = self.submodules[module] + path[len(module):]
                break
        return tune_path(path)

    def submodule(self, module: str) -> None:
        if (rule := rule_module(module)) not in (None, module):
            self.submodules[module] = rule

    # positions: ast counts columns in UTF-8 bytes
    def offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def replace(self, node: ast.AST, text: str) -> None:
        self.edits.append((*self.span(node), text))

    def left(self, node: ast.AST, message: str) -> None:
        self.unrewritten.append(Unrewritten(self.path, node.lineno, message))

    def result(self) -> str:
        data = self.data
        for start, end, text in sorted(self.edits, reverse=True):
            data = data[:start] + text.encode() + data[end:]
        return data.decode()

    # the imports bind names to Ray paths
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] != "ray":
                continue
            self.imports.append(node)
            self.submodule(alias.name)
            self.bind(alias.asname or "ray", alias.name if alias.asname else "ray", node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] != "ray":
            return
        self.imports.append(node)
        self.submodule(node.module)
        for alias in node.names:
            if alias.name != "*":
                self.bind(alias.asname or alias.name, f"{node.module}.{alias.name}", node)

    def bind(self, name: str, path: str, statement: ast.stmt) -> None:
        self.bindings.setdefault(name, []).append((self.canonical(path), statement))

    def binding(self, name: str, use: ast.AST) -> tuple[str, ast.stmt]:
        """The import that binds ``name`` where ``use`` is: the innermost scope holding both, then the
        latest such import."""
        def rank(binding: tuple[str, ast.stmt]) -> tuple[int, int]:
            scope = self.scopes[binding[1]]
            inside = scope.lineno <= use.lineno <= scope.end_lineno if hasattr(scope, "lineno") else True
            return (getattr(scope, "lineno", 0) if inside else -1, binding[1].lineno)
        return max(self.bindings[name], key=rank)

    def first_binding(self, name: str, statement: ast.stmt) -> ast.stmt:
        """The first import binding ``name`` in ``statement``'s scope: the trainkit modules a use of the
        name needs are imported with it, so they are bound wherever the name is (a later import, in
        source order, could follow the use)."""
        scope = self.scopes[statement]
        return min((s for _, s in self.bindings[name] if self.scopes[s] is scope), key=_position)

    # uses of the bound names
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (names := _dotted(node)) is None or names[0] not in self.bindings:
            self.generic_visit(node)
        else:
            self.rewrite_use(node, names)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.bindings:
            self.rewrite_use(node, [node.id])

    def rewrite_use(self, node: ast.expr, names: list[str]) -> None:
        bound, statement = self.binding(names[0], node)
        path = self.canonical(".".join([bound, *names[1:]]))
        ray_module = _ray_module(path)
        if ray_module is None or len(ray_module.split(".")) < len(bound.split(".")) - 1:
            self.kept.add(statement)  # ray.init, ray.data, ray.tune...: Ray's
            return
        depth = len(ray_module.split(".")) - len(bound.split(".")) + 1  # attributes to the name after the module
        if depth <= 0:  # a name imported from a Ray Train module, e.g. ScalingConfig or RayDDPStrategy
            module, name = bound.rsplit(".", 1)
            while isinstance(node, ast.Attribute):
                node = node.value
            if (new := trainkit_name(module, name)) != name and node.id == name:
                self.replace(node, new)
            return
        while len(_dotted(node)) > depth + 1:
            node = node.value
        used = _dotted(node)
        if len(used) == depth:  # the module itself
            if bound == ray_module:
                return  # its import is rewritten to bind the same name to trainkit's module
            self.replace(node, trainkit_module(ray_module))
            self.needs.setdefault(self.first_binding(names[0], statement), []).append(trainkit_module(ray_module))
            return
        name = used[-1]
        target, new = trainkit_module(ray_module), trainkit_name(ray_module, name)
        # a Ray submodule reached by attribute has no counterpart there, installed or not
        if f"{ray_module}.{name}" in MODULES or _has(target, new) is False:
            self.left(node, f"{ray_module}.{name} has no trainkit counterpart ({target} has no {new})")
            self.kept.add(statement)
            return
        if bound == ray_module:  # `import ray.train.lightning as rl` / `from ray import train`: keep the name
            if new != name:
                self.replace(node, f"{names[0]}.{new}")
            return
        self.replace(node, f"{target}.{new}")
        self.needs.setdefault(self.first_binding(names[0], statement), []).append(target)

    # things no rule covers
    def visit_Call(self, node: ast.Call) -> None:
        func = _dotted(node.func)
        if func and func[-1] in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("ray.train"):
                self.left(node, f"dynamic import of {arg.value!r}: change it by hand")
        if func and func[0] in self.bindings:
            bound, _ = self.binding(func[0], node)
            path = self.canonical(".".join([bound, *func[1:]]))
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if path in ("ray.tune.Tuner", "ray.tune.run"):
                trainable = node.args[0] if node.args else keywords.get("trainable" if path.endswith("Tuner")
                                                                         else "run_or_experiment")
            elif path == "ray.tune.Tuner.restore":
                trainable = node.args[1] if len(node.args) > 1 else keywords.get("trainable")
            else:
                trainable = None
            if trainable is not None and self.is_trainer(trainable):
                self.left(node, f"{path}(trainer) wraps a trainer, which trainkit does not support: call "
                                "trainer.fit() inside a trial function (docs/hyperparameter-search.md)")
        self.generic_visit(node)

    def is_trainer(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            node = self.assigned.get(node.id, node)
        if not isinstance(node, ast.Call) or not (func := _dotted(node.func)):
            return False
        if func[0] in self.bindings:  # the name it was imported as: `TorchTrainer as TT`
            func = self.canonical(".".join([self.binding(func[0], node)[0], *func[1:]])).split(".")
        return func[-1].endswith("Trainer")

    # the imports themselves, once every use is known
    def rewrite_imports(self) -> None:
        done: set[str] = set()  # trainkit modules a top-level import binds already
        written: set[str] = set()  # `import trainkit_x as y` lines written at the top level

        def once(line: str, top: bool) -> list[str]:
            """``[line]``, or none where the top level has it already: no import is written twice."""
            if top and line in written:
                return []
            if top:
                written.add(line)
            return [line]

        for statement in sorted(set(self.imports), key=_position):  # source order: the first needs it
            indent = self.lines[statement.lineno - 1][:statement.col_offset]
            top = statement.col_offset == 0
            lines: list[str] = []

            def need(module: str) -> None:
                if not (top and module in done) and f"import {module}" not in lines:
                    lines.append(f"import {module}")
                if top:
                    done.add(module)

            if isinstance(statement, ast.Import):
                keep = []
                for alias in statement.names:
                    target = trainkit_module(alias.name)
                    if alias.name.split(".")[0] != "ray" or target is None:
                        if alias.name.startswith("ray.train"):
                            self.left(statement, f"no rule for module {alias.name}: change it by hand")
                        keep.append(alias)
                    elif alias.asname:
                        lines += once(f"import {target} as {alias.asname}", top)
                    else:  # `import ray.train.torch` binds `ray`: becomes `import trainkit_torch`
                        if f"import {target}" not in lines and not (top and target in done):  # never twice
                            lines.append(f"import {target}")
                        if top:  # a function's import binds it in that function only
                            done.add(target)
                        if statement in self.kept and not self.plain_ray_import(statement):
                            keep.append(ast.alias("ray"))
                if keep == list(statement.names):
                    lines = []
                elif keep:
                    lines.insert(0, "import " + ", ".join(_alias(a) for a in keep))
                for module in self.needs.get(statement, []):
                    need(module)
                if keep == list(statement.names) and lines:
                    self.edits.append((*[self.span(statement)[1]] * 2, "".join(f"\n{indent}{x}" for x in lines)))
                elif lines:
                    self.replace(statement, f"\n{indent}".join(lines))
                elif not keep:  # all it imported is imported above already
                    self.remove(statement)
                continue
            module = statement.module
            target = trainkit_module(module)
            if target is None and (module + ".").startswith("ray.train."):
                self.left(statement, f"no rule for module {module}: change it by hand")
            keep, names, modules = [], [], []
            removed = False  # a `from ray import train` whose import is written above already
            for alias in statement.names:
                if submodule := MODULES.get(f"{module}.{alias.name}"):  # `from ray import train`
                    modules += once(f"import {submodule} as {alias.asname or alias.name}", top)
                    removed = True
                elif target is None or alias.name == "*":
                    keep.append(alias)
                else:
                    new = trainkit_name(module, alias.name)
                    if _has(target, new) is False:
                        self.left(statement, f"{module}.{alias.name} has no trainkit counterpart "
                                             f"({target} has no {new})")
                        keep.append(alias)
                    else:
                        names.append(ast.alias(new, alias.asname if alias.asname != new else None))
            for needed in self.needs.get(statement, []):
                need(needed)
            if not names and not modules and not lines:
                if removed and keep:
                    self.replace(statement, f"from {module} import " + ", ".join(_alias(a) for a in keep))
                elif removed:
                    self.remove(statement)
                continue
            if not keep and not modules and not lines:  # the usual case: edit the module and the names in place
                self.rewrite_from(statement, target, names)
                continue
            parts = ([f"from {module} import " + ", ".join(_alias(a) for a in keep)] if keep else [])
            parts += ([f"from {target} import " + ", ".join(_alias(a) for a in names)] if names else [])
            self.replace(statement, f"\n{indent}".join(parts + modules + lines))

    def remove(self, statement: ast.stmt) -> None:
        """Delete ``statement``: its lines when nothing but a comment shares them, else it becomes ``pass``."""
        start, end = self.span(statement)
        line_start = self.line_starts[statement.lineno - 1]
        line_end = self.line_starts[statement.end_lineno]
        before, after = self.data[line_start:start], self.data[end:line_end]
        if not before.strip() and (not after.strip() or after.strip().startswith(b"#")):
            self.edits.append((line_start, line_end, ""))
        else:
            self.replace(statement, "pass")

    def plain_ray_import(self, statement: ast.stmt) -> bool:
        """Whether an ``import ray`` beside ``statement`` (in its scope) binds ``ray`` already."""
        return any(isinstance(other, ast.Import) and any(a.name == "ray" and not a.asname for a in other.names)
                   and self.scopes[other] is self.scopes[statement] for _, other in self.bindings["ray"])

    def rewrite_from(self, statement: ast.ImportFrom, target: str, names: list[ast.alias]) -> None:
        """``from ray.x import A, B`` -> ``from trainkit_x import A, B``, token by token: the rest
        (parentheses, line breaks, comments) stays."""
        start, end = self.span(statement)
        text = self.data[start:end].decode()
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        base_line, base_col = statement.lineno, statement.col_offset
        first = next(i for i, t in enumerate(tokens) if t.string == "from") + 1
        last = next(i for i, t in enumerate(tokens) if t.string == "import")

        def at(token_pos: tuple[int, int]) -> int:
            line, col = token_pos
            text_line = text.splitlines(keepends=True)[line - 1]
            return self.offset(base_line + line - 1, (base_col if line == 1 else 0) + len(text_line[:col].encode()))

        self.edits.append((at(tokens[first].start), at(tokens[last - 1].end), target))
        for alias, new in zip(statement.names, names):
            if alias.name != new.name:
                begin = self.offset(alias.lineno, alias.col_offset)
                self.edits.append((begin, begin + len(alias.name), new.name))
                if alias.asname == new.name:  # `RayDDPStrategy as DDPStrategy`
                    self.edits.append((begin + len(alias.name), self.offset(alias.end_lineno, alias.end_col_offset),
                                       ""))

    def visit_Module(self, node: ast.Module) -> None:
        self.assigned = {t.id: n.value for n in ast.walk(node) if isinstance(n, ast.Assign)
                         for t in n.targets if isinstance(t, ast.Name)}
        # imports first, so that uses anywhere see the names they bind
        scopes = [(node, node)]
        while scopes:
            scope, parent = scopes.pop()
            for child in ast.iter_child_nodes(parent):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    self.scopes[child] = scope
                    (self.visit_Import if isinstance(child, ast.Import) else self.visit_ImportFrom)(child)
                inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
                scopes.append((child if inner else scope, child))
        for child in ast.iter_child_nodes(node):
            self.visit(child)
        self.rewrite_imports()

    def visit_alias(self, node: ast.alias) -> None:  # imports are rewritten as a whole
        pass


def _position(node: ast.stmt) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _alias(alias: ast.alias) -> str:
    return f"{alias.name} as {alias.asname}" if alias.asname else alias.name


def migrate_source(source: str, path: str = "<string>") -> Migration:
    """``source`` rewritten to trainkit, and what could not be."""
    try:
        tree = ast.parse(source, path)
    except SyntaxError as exc:
        return Migration(path, source, source, [Unrewritten(path, exc.lineno or 0, f"does not parse: {exc.msg}")])
    rewriter = _Rewriter(source, path)
    rewriter.visit(tree)
    return Migration(path, source, rewriter.result(), sorted(rewriter.unrewritten, key=lambda u: u.line))


def python_files(paths: list[str]) -> list[Path]:
    """The files ``paths`` name: each .py file, and every .py file under each directory."""
    files = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.py") if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or directory: {name}")
    return files


def migrate_paths(paths: list[str], write: bool = False) -> list[Migration]:
    """Migrate every Python file under ``paths``; with ``write``, in place."""
    migrations = []
    for file in python_files(paths):
        with open(file, encoding="utf-8", newline="") as f:  # newline="": keep \r\n as it is
            migration = migrate_source(f.read(), str(file))
        if write and migration.migrated != migration.source:
            with open(file, "w", encoding="utf-8", newline="") as f:
                f.write(migration.migrated)
        migrations.append(migration)
    return migrations
