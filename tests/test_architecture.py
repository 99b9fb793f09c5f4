"""The package's architecture, checked from its source: wings import only wings below them, no module imports
the package root, there is no import circle, only the CLI parses arguments, the HTTP client stays lean (it
reaches no engine module, and importing it in a fresh interpreter loads neither the native core nor numpy), and
no module uses or overrides a private (``_name``) member of another wing (wings meet through declared interfaces).

Every import statement counts, including those inside functions (a lazy import is still a dependency).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import medretrieve

PACKAGE = Path(medretrieve.__file__).resolve().parent

# wings from the bottom up; a module may import its own wing and any wing listed before it
WINGS: Tuple[Tuple[str, ...], ...] = (
    ("_core", "_version", "_exports", "_files", "_assets", "index", "fusion", "records", "wire",
     "outbound", "filters"),
    ("models",),
    ("corpus",),
    ("retrieval",),
    ("training",),
    ("generation",),
    ("evaluation",),
    ("client",),
    ("server",),
    ("distributed",),  # above the server: Ray Serve's deployment serves the server's app over shards
    ("integrations",),
    ("testing",),
    ("cli",),
)
RANK: Dict[str, int] = {name: i for i, wing in enumerate(WINGS) for name in wing}
ROOT_ONLY = {"__init__", "__main__"}  # the root re-exports everything; __main__ runs the CLI
# what the HTTP client may reach, directly or through what it imports: the wire format and the plain records
LEAN_CLIENT = {"records", "wire", "filters", "_version", "_exports", "outbound"}  # _exports: the root's lazy names
# third-party modules a lean client must not load (the engine's numerics and models)
ENGINE_LIBRARIES = ("numpy", "onnxruntime", "tokenizers", "bm25s", "torch", "scipy")


def _modules() -> Dict[str, Path]:
    out = {"_core": PACKAGE / "_core.pyi"}  # the native extension (its stub stands for it)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path) -> List[Tuple[str, int]]:
    """(imported medretrieve module or name, line) for every import in the module (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "medretrieve" or node.module.startswith("medretrieve.")):
                target = node.module[len("medretrieve"):].lstrip(".")
            else:
                continue
            for alias in node.names:
                out.append((f"{target}.{alias.name}".lstrip("."), node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "medretrieve" or alias.name.startswith("medretrieve."):
                    out.append((alias.name[len("medretrieve"):].lstrip("."), node.lineno))
    return out


def _resolve(target: str, modules: Dict[str, Path]) -> str:
    """The module an import names: ``retrieval.query.Query`` -> ``retrieval.query``; "" for the root itself."""
    parts = target.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def _graph() -> Dict[str, Set[Tuple[str, int]]]:
    modules = _modules()
    return {name: {(_resolve(t, modules), line) for t, line in _imports(name, path)}
            for name, path in modules.items() if path.suffix == ".py"}


def _wing(module: str) -> str:
    return module.split(".")[0]


def test_every_module_belongs_to_a_wing():
    stray = [m for m in _modules() if m not in ROOT_ONLY and _wing(m) not in RANK]
    assert not stray, f"modules outside the wings {WINGS}: {stray}"


def test_no_module_imports_the_package_root():
    bad = [f"{m}:{line}" for m, deps in _graph().items() if m not in ROOT_ONLY for d, line in deps if d == ""]
    assert not bad, f"these import names from the package root (import the defining module instead): {bad}"


def test_wings_import_only_wings_below_them():
    bad = []
    for m, deps in _graph().items():
        if m in ROOT_ONLY:
            continue
        for d, line in deps:
            if d and d not in ROOT_ONLY and RANK[_wing(d)] > RANK[_wing(m)]:
                bad.append(f"{m}:{line} imports {d}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_circle():
    graph = {m: {d for d, _ in deps if d and d != m} for m, deps in _graph().items() if m not in ROOT_ONLY}
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                pytest.fail("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_only_the_cli_parses_arguments():
    bad = []
    for name, path in _modules().items():
        if _wing(name) == "cli" or path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                bad.append(name)
            if isinstance(node, ast.ImportFrom) and node.module == "argparse":
                bad.append(name)
    assert not bad, f"argparse outside medretrieve.cli: {bad}"


def _reach(start: str) -> Set[str]:
    """Every module ``start`` imports, directly or through the modules it imports (the package root excluded)."""
    graph = {m: {d for d, _ in deps if d and d not in ROOT_ONLY} for m, deps in _graph().items()}
    seen: Set[str] = set()
    todo = [m for m in graph if m == start or m.startswith(start + ".")]
    while todo:
        m = todo.pop()
        for d in graph.get(m, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_the_client_reaches_only_the_wire_format():
    outside = sorted(m for m in _reach("client") if _wing(m) != "client" and m not in LEAN_CLIENT)
    assert not outside, f"medretrieve.client reaches engine modules (keep it to {sorted(LEAN_CLIENT)}): {outside}"


def test_importing_the_client_loads_no_engine():
    """In a fresh interpreter (the package root runs first: its re-exports must stay lazy)."""
    code = ("import sys, json, medretrieve.client; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('medretrieve') or "
            f"m.split('.')[0] in {ENGINE_LIBRARIES!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ.copy(), check=True).stdout
    allowed = {"medretrieve"} | {f"medretrieve.{name}" for name in LEAN_CLIENT}
    heavy = sorted(m for m in json.loads(out) if m not in allowed and not m.startswith("medretrieve.client"))
    assert not heavy, f"import medretrieve.client loaded {heavy}"


def test_the_checker_sees_a_planted_upward_import_and_circle(tmp_path, monkeypatch):
    """The checks above must be able to fail: plant a bad package and run them on it."""
    pkg = tmp_path / "medretrieve"
    (pkg / "corpus").mkdir(parents=True)
    (pkg / "retrieval").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "corpus" / "__init__.py").write_text("")
    (pkg / "retrieval" / "__init__.py").write_text("")
    (pkg / "corpus" / "a.py").write_text("from ..retrieval.b import X\n")
    (pkg / "retrieval" / "b.py").write_text("from ..corpus import a\nX = 1\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    with pytest.raises(AssertionError, match="corpus.a:1 imports retrieval.b"):
        test_wings_import_only_wings_below_them()
    with pytest.raises(pytest.fail.Exception, match="import circle"):
        test_no_import_circle()


def test_the_checker_sees_a_client_that_reaches_the_engine(tmp_path, monkeypatch):
    pkg = tmp_path / "medretrieve"
    (pkg / "client").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "client" / "__init__.py").write_text("from ..wire import X\n")
    (pkg / "wire.py").write_text("from .index import Index\nX = 1\n")
    (pkg / "index.py").write_text("Index = 1\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    with pytest.raises(AssertionError, match=r"reaches engine modules .*\['index'\]"):
        test_the_client_reaches_only_the_wire_format()


# ----------------------------------------------------------------- private names stay in their wing
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _same_wing(a: str, b: str) -> bool:
    """Whether two modules sit in one wing (the native layer's modules share the bottom one)."""
    return RANK.get(_wing(a), -1) == RANK.get(_wing(b), -2)


def _foreign_names(name: str, tree: ast.AST, modules: Dict[str, Path]) -> Dict[str, str]:
    """Local name -> the module of another wing it was imported from (``from X import N`` binds N to X.N's
    module; ``import medretrieve.X as N`` binds N to X)."""
    out: Dict[str, str] = {}
    path = modules[name]
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("medretrieve."):
                target = node.module[len("medretrieve."):]
            else:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}".lstrip(".")
                source = full if full in modules else _resolve(full, modules)
                if source and not _same_wing(source, name):
                    out[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("medretrieve.") and alias.asname:
                    target = alias.name[len("medretrieve."):]
                    if not _same_wing(target, name):
                        out[alias.asname] = target
    return out


def _class_methods(module: str, cls: str, modules: Dict[str, Path]) -> Set[str]:
    """Methods a class defines in its own body (empty when the class is not found)."""
    path = modules.get(module)
    if path is None or path.suffix != ".py":
        return set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return set()


def test_no_module_uses_or_overrides_a_private_name_of_another_wing():
    """A wing meets another through its public names: no ``from X import _name`` across wings, no ``N._name``
    on a name imported from another wing, and no subclass of another wing's class defining a ``_name`` method
    that class defines (overriding its private method)."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if name in ROOT_ONLY or path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        foreign = _foreign_names(name, tree, modules)
        for local, full in foreign.items():
            if _private(full.rsplit(".", 1)[-1]) and full not in modules:
                bad.append(f"{name} imports the private {full}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in foreign):
                bad.append(f"{name}:{node.lineno} uses {foreign[node.value.id]}.{node.attr}")
            if isinstance(node, ast.ClassDef):
                own = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
                for base in node.bases:
                    if isinstance(base, ast.Name) and base.id in foreign:
                        full = foreign[base.id]
                        module, cls = full.rsplit(".", 1)
                        for method in sorted(m for m in own & _class_methods(module, cls, modules) if _private(m)):
                            bad.append(f"{name}:{node.lineno} {node.name} overrides {full}.{method}")
    assert not bad, "private names used across wings:\n" + "\n".join(bad)


def test_the_checker_sees_a_private_override_and_use_across_wings(tmp_path, monkeypatch):
    """Planted: a sharded generator overriding the base generator's private first stage (as
    ShardedCandidateGenerator did), a call of another wing's private function, an import of a private name."""
    pkg = tmp_path / "medretrieve"
    (pkg / "retrieval").mkdir(parents=True)
    (pkg / "distributed").mkdir()
    for init in (pkg, pkg / "retrieval", pkg / "distributed"):
        (init / "__init__.py").write_text("")
    (pkg / "retrieval" / "candidates.py").write_text(
        "class CandidateGenerator:\n    def _first_stage(self):\n        return 1\n    def gather(self):\n"
        "        return self._first_stage()\n\ndef _helper():\n    return 2\n")
    (pkg / "retrieval" / "own.py").write_text(  # inside its own wing a private name is fine
        "from .candidates import CandidateGenerator, _helper\n\nclass Mine(CandidateGenerator):\n"
        "    def _first_stage(self):\n        return _helper()\n")
    (pkg / "distributed" / "search.py").write_text(
        "from ..retrieval import candidates\nfrom ..retrieval.candidates import CandidateGenerator, _helper\n\n"
        "class Sharded(CandidateGenerator):\n    def _first_stage(self):\n        return candidates._helper()\n"
        "    def gather(self):\n        return 3\n    def _own(self):\n        return 4\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    with pytest.raises(AssertionError) as err:
        test_no_module_uses_or_overrides_a_private_name_of_another_wing()
    found = [line.strip() for line in str(err.value).split("\nassert ")[0].splitlines()[1:]]
    assert sorted(found) == sorted([
        "distributed.search imports the private retrieval.candidates._helper",
        "distributed.search:6 uses retrieval.candidates._helper",
        "distributed.search:4 Sharded overrides retrieval.candidates.CandidateGenerator._first_stage"])
