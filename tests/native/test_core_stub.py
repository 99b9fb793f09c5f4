"""python/medretrieve/_core.pyi names exactly what the native module exports (so mypy checks the wrappers against
the real surface): every function, class and public method, and nothing the module lacks."""
from __future__ import annotations

import ast
from pathlib import Path

import medretrieve
from medretrieve import _core

STUB = Path(medretrieve.__file__).with_name("_core.pyi")
ONLY_WITH_CUDA = {"_CudaTable"}


def stub_names() -> dict:
    tree = ast.parse(STUB.read_text())
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):  # a constant (feature flags)
            names[node.target.id] = None
    return names


def test_stub_matches_the_module() -> None:
    stub = stub_names()
    exported = {n for n in dir(_core) if not n.startswith("__")}
    assert exported - set(stub) == set(), "exported but missing from _core.pyi"
    assert set(stub) - exported - ONLY_WITH_CUDA == set(), "in _core.pyi but not exported"
    for name, methods in stub.items():
        if methods is None or name not in exported:
            continue
        cls = getattr(_core, name)
        public = {m for m in vars(cls) if (not m.startswith("__") or m == "__len__") and not m.startswith("_pybind11")}
        assert public == methods, (name, public ^ methods)
