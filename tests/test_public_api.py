"""The public API: declared once per package (its ``if TYPE_CHECKING:`` block, read by ``medretrieve._exports``),
the root's names taken from its subpackages', every name the docs import present, nothing else leaking, and no
process-wide state changed by library calls the caller did not ask for."""
from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import medretrieve
from medretrieve._exports import declared_names

PACKAGE = Path(medretrieve.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]  # the checkout (the package may be installed elsewhere)
LAZY_PACKAGES = ["medretrieve", "medretrieve.corpus", "medretrieve.retrieval", "medretrieve.generation",
                 "medretrieve.models", "medretrieve.training", "medretrieve.evaluation",
                 "medretrieve.evaluation.bioasq", "medretrieve.evaluation.medrgb", "medretrieve.integrations",
                 "medretrieve.distributed"]
# subpackages whose names need an extra that may be absent: skipped, not failed, when it is
EXTRA_OF = {"medretrieve.integrations": ("langchain_core", "llama_index.core", "haystack"),
            "medretrieve.distributed": ("ray",)}


def _has(modules: Tuple[str, ...]) -> bool:
    return all(importlib.util.find_spec(m.split(".")[0]) is not None for m in modules)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_each_package_declares_its_names_once_and_each_resolves(name: str) -> None:
    pkg = importlib.import_module(name)
    table = declared_names(pkg.__file__)
    assert table, f"{name} declares no public name"
    assert [n for n in pkg.__all__ if n in table] == list(table), f"{name}.__all__ is not its declaration"
    if not _has(EXTRA_OF.get(name, ())):
        pytest.skip(f"{name} needs {EXTRA_OF[name]}")
    for public, (module, attr) in table.items():
        assert getattr(pkg, public) is getattr(importlib.import_module(module, name), attr)


def test_the_root_is_built_from_the_subpackages_declarations() -> None:
    """Every root name comes from a subpackage that declares it (or a ground-floor module's ``__all__``): the
    root lists which names it lifts, never where they live."""
    for public, (module, attr) in declared_names(medretrieve.__file__).items():
        source = importlib.import_module(module, "medretrieve")
        declared = declared_names(source.__file__) or {n: None for n in getattr(source, "__all__", ())}
        assert attr in declared or public == "__version__", f"medretrieve.{public}: {module} does not declare {attr}"


def test_nothing_else_leaks_from_the_root() -> None:
    """``dir(medretrieve)`` shows the declared names and the subpackages, and no helper module or import."""
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    # (pytest's assertion rewriting, which it applies to the package of a pytest11 plugin, adds "@py_builtins")
    public = {n for n in dir(medretrieve) if n.isidentifier() and not n.startswith("_")}
    leaked = public - set(medretrieve.__all__) - subpackages - modules
    assert not leaked, f"undeclared public names in medretrieve: {sorted(leaked)}"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        getattr(medretrieve, "NoSuchThing")


_IMPORT = re.compile(r"^\s*from (medretrieve(?:\.[a-z_]+)*) import \(?([A-Za-z_, ]+)\)?", re.M)


def _doc_imports() -> List[Tuple[str, str, str]]:
    """(page, module, name) for every ``from medretrieve... import name`` in a python block of the docs."""
    out = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python[^\n]*\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for module, names in _IMPORT.findall(block):
                out += [(page.name, module, n.strip()) for n in names.split(",") if n.strip()]
    return out


def test_every_name_the_docs_import_exists() -> None:
    found = _doc_imports()
    assert len(found) > 10, "the docs' imports were not found (pattern out of date?)"
    missing = []
    for page, module, name in found:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # an extra that is not installed here: not the docs' fault
            if not exc.name or exc.name.startswith("medretrieve"):
                missing.append(f"{page}: {module} ({exc})")
            continue
        if not hasattr(mod, name) and importlib.util.find_spec(f"{module}.{name}") is None:
            missing.append(f"{page}: from {module} import {name}")
    assert not missing, "the docs import names that do not exist:\n" + "\n".join(missing)


def test_a_retriever_leaves_the_garbage_collector_as_it_was(medretrieve_collection) -> None:
    """``Retriever(...)`` warms up without freezing the process's heap (``gc.freeze``); only
    ``warmup(freeze_gc=True)``, which ``medretrieve serve`` calls for its own process, does."""
    code = ("import gc, json, sys; from medretrieve.corpus.collection import Collection; "
            "from medretrieve.retrieval.retriever import Retriever; "
            "r = Retriever(Collection.open(sys.argv[1])); before = gc.get_freeze_count(); "
            "r.search('What is the first-line treatment of type 2 diabetes?', k=3); "
            "after_search = gc.get_freeze_count(); r.warmup(freeze_gc=True); "
            "print(json.dumps([before, after_search, gc.get_freeze_count()]))")
    out = subprocess.run([sys.executable, "-c", code, str(medretrieve_collection.directory)],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    before, after_search, frozen = json.loads(out.strip().splitlines()[-1])
    assert before == 0 and after_search == 0
    assert frozen > 0


def test_no_module_names_a_dependency_it_does_not_use() -> None:
    """bm25s was replaced by medretrieve's own BM25 (corpus/lexical.py): it is neither a dependency nor imported."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.S | re.M)
    assert deps and "bm25s" not in deps.group(1)
    users: Dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(n.split(".")[0] == "bm25s" for n in names):
                    users[str(path.relative_to(PACKAGE))] = node.lineno
    assert not users, f"modules import bm25s: {users}"
