"""Small file helpers every wing shares: JSON reading with errors that name the file, atomic writes.

An atomic write goes to a temporary file beside the target (same directory, so the rename cannot cross file
systems), is flushed and fsynced, then renamed over the target: a crash leaves the old file or the new one,
never a torn one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]


def read_json(path: PathLike) -> Any:
    """The JSON value in ``path``; ValueError naming the file when it is missing or not valid JSON."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def write_text_atomic(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json_atomic(path: PathLike, value: Any, indent: Union[int, None] = 1) -> None:
    """Write ``value`` as JSON to ``path`` atomically (values JSON does not know, e.g. paths, as strings)."""
    write_text_atomic(path, json.dumps(value, indent=indent, ensure_ascii=False, default=str))
