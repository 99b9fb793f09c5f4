"""Which shard a document belongs to, and the manifest a sharded build writes (``shards.json``).

A sharded deployment is a directory holding ``shards.json`` and one ordinary collection per shard
(``shard-00000/`` ...). A document goes to shard ``shard_of(document id, n)``: a hash of its id, stable across
processes, machines and Python versions (unlike ``hash()``), so every chunk of a document lands in the same shard
and a shard can be rebuilt alone.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

from .._files import read_json, write_json_atomic

FORMAT = "medretrieve-shards-1"
MANIFEST = "shards.json"
PathLike = Union[str, "os.PathLike[str]"]


def shard_of(document_id: str, shards: int) -> int:
    """The shard (0..shards-1) of a document: the first 8 bytes of blake2b(id) modulo ``shards``."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    digest = hashlib.blake2b(document_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % shards


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


def write_manifest(out: Path, shards: Sequence[int], info: Dict[str, Any]) -> Path:
    """Write ``out/shards.json`` (atomically) naming the directories of ``shards`` (the shard numbers that hold
    documents); ``info``: what the build records beside them (settings, counts, read report)."""
    path = out / MANIFEST
    write_json_atomic(path, {"format": FORMAT, "assignment": "blake2b-64(document id) mod shards",
                             "shards": [shard_name(i) for i in shards], **info})
    return path


def shard_dirs(shards: Union[PathLike, Sequence[PathLike]]) -> List[Path]:
    """The collection directories of a deployment: a sharded build's directory (or its ``shards.json``), or a
    list of collection directories however they were built. ValueError naming what is wrong."""
    if isinstance(shards, (str, os.PathLike)):
        path = Path(shards)
        manifest = path if path.name == MANIFEST else path / MANIFEST
        if not manifest.is_file():
            raise ValueError(f"{path} is not a sharded build (no {MANIFEST}); pass a list of collection "
                             "directories instead")
        data = read_json(manifest)
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("shards"), list):
            raise ValueError(f"{manifest} is not a medretrieve shards manifest (format {FORMAT})")
        root = manifest.parent.resolve()
        dirs = []
        for name in data["shards"]:
            d = (root / str(name)).resolve()
            if not d.is_relative_to(root):
                raise ValueError(f"{manifest} names {name!r}, a directory outside the deployment")
            dirs.append(d)
    else:
        dirs = [Path(d) for d in shards]
    if not dirs:
        raise ValueError("no shards given")
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise ValueError("a shard directory is named twice")
    return dirs
