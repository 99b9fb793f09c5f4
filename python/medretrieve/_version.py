"""The package version, read from the installed distribution's metadata (pyproject.toml is the one source).

A source checkout used without installing (``PYTHONPATH=python``) has no metadata; it reports the version
written in ``pyproject.toml`` next to it, or ``0+unknown``. ``__version__`` is computed on first access:
importing ``importlib.metadata`` costs ~60 ms, which a one-shot CLI search should not pay.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("medretrieve")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        if pyproject.is_file():
            m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(encoding="utf-8"), re.M)
            if m:
                return m.group(1)
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return package_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
