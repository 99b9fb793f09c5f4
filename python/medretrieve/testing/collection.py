"""A tiny collection for users' tests: the first documents of the demo corpus shipped with medretrieve, embedded
with the embedded default model (shipped inside medretrieve), offline, in seconds."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

from .._assets import ASSETS
from ..corpus.collection import Collection

DEMO_CORPUS = ASSETS / "demo_corpus.jsonl"
TINY_DOCUMENTS = 24  # enough variety for every query type and section route, quick to embed


def build_tiny_collection(directory: Union[str, "os.PathLike[str]"], n_documents: int = TINY_DOCUMENTS) -> Collection:
    """Build the first ``n_documents`` (1-52) demo documents into ``directory`` (which must not exist)."""
    from ..models.encoders import default_model_dir

    lines = DEMO_CORPUS.read_text(encoding="utf-8").splitlines()
    if not 1 <= n_documents <= len(lines):
        raise ValueError(f"n_documents must be in [1, {len(lines)}], got {n_documents}")
    docs = [json.loads(line) for line in lines[:n_documents]]
    return Collection.build(docs, Path(directory), encoder=default_model_dir(), progress=False)
