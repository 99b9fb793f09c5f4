"""The package version, read from the installed distribution's metadata (pyproject.toml is the one source).

A source checkout used without installing (``PYTHONPATH=python``) has no metadata; it reports the version
written in ``pyproject.toml`` next to it, or ``0+unknown``.
"""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path


def _version() -> str:
    try:
        return metadata.version("medretrieve")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        if pyproject.is_file():
            m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(encoding="utf-8"), re.M)
            if m:
                return m.group(1)
        return "0+unknown"


__version__ = _version()
