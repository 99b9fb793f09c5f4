"""Public names declared once per package, loaded on first use.

A package lists its public names once, as the ``from .module import Name as Name`` lines of its
``if TYPE_CHECKING:`` block. Type checkers and IDEs read them there; :func:`attach` reads the same lines when the
package is imported and loads each name on first use (PEP 562), so ``import medretrieve`` loads neither numpy nor
the native core, and a name cannot be public for the type checker and missing at run time (or the reverse).
The root package re-exports names from its subpackages the same way, so its list is built from theirs.
"""
from __future__ import annotations

import ast
import importlib
import sys
from typing import Any, Callable, Dict, List, Tuple


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def declared_names(init_file: str) -> Dict[str, Tuple[str, str]]:
    """``{public name: (relative module, name there)}`` read from the ``if TYPE_CHECKING:`` block of
    ``init_file`` (relative ``from`` imports only, in the order written)."""
    with open(init_file, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=init_file)
    table: Dict[str, Tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.level > 0:
                    for alias in imp.names:
                        table[alias.asname or alias.name] = ("." * imp.level + (imp.module or ""), alias.name)
    return table


def attach(package: str, init_file: str, extra: Tuple[str, ...] = ()
           ) -> Tuple[Callable[[str], Any], Callable[[], List[str]], List[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` (its ``__name__``) from its ``__init__`` file's
    declaration; ``extra`` names defined in the ``__init__`` itself join ``__all__``."""
    table = declared_names(init_file)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = table[name]
        value = getattr(importlib.import_module(module, package), attr)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__, [*extra, *table]
