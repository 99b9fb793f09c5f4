"""A collection's ``manifest.json`` as typed objects, parsed and validated before any other file is opened.

:func:`read_manifest` reads the file (at most :data:`~.store.MANIFEST_MAX_BYTES`), parses it with pydantic's JSON
parser in strict mode (no ``"16"`` for 16, no ``1.0`` for 1; nesting and number sizes bounded) and checks what
each field may hold: encoder widths and geometry that agree, an index of a dtype and space the core knows,
chunking settings :class:`~.chunking.ChunkingConfig` accepts, counts and sizes that are non-negative integers,
and every path a relative one inside the collection (:func:`~.store.relative_path_problem`). Whatever is wrong
comes back as one :class:`~.store.DamagedCollection` naming the field (``manifest.json: encoder.dim: ...``),
never a ``TypeError`` or ``KeyError`` from deep in the loader.

Fields a newer writer adds are kept (and written back) but not interpreted; ``files`` and ``counts`` are absent
in collections written before they were recorded.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Dict, Literal, Optional, Type, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from .chunking import ChunkingConfig
from .store import FORMAT, MANIFEST, MANIFEST_MAX_BYTES, DamagedCollection, relative_path_problem

MAX_DIM = 65_536  # widest vector an encoder entry may declare (the widest real encoders are 4,096)
MAX_COUNT = 1 << 40  # rows, bytes, documents: far above any real collection, far below int64's end


def _relative(value: str) -> str:
    problem = relative_path_problem(value)
    if problem is not None:
        raise ValueError(f"{problem}, outside the collection (every path it names must stay inside its folder)")
    return value


_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*[+*{]")


def _safe_chunking(cfg: ChunkingConfig) -> ChunkingConfig:
    # the title pattern runs on every section title of every document added: a nested quantifier such as (a+)+
    # can take exponential time on one title, so a manifest may not carry one
    pattern = cfg.complex_title_pattern
    if len(pattern) > 2000 or _NESTED_QUANTIFIER.search(pattern):
        raise ValueError("complex_title_pattern is over 2000 characters or holds a nested quantifier such as (a+)+")
    return cfg


RelPath = Annotated[str, AfterValidator(_relative)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class Strict(BaseModel):
    """A JSON object of a collection's files: strict types, finite numbers, unknown fields kept."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, frozen=True)


class EncoderEntry(Strict):
    """A model the collection holds: ``dir`` inside the collection, where it was copied from (``source``, for the
    record only: never opened), its sha256, kind, vector width and geometry."""

    dir: RelPath
    source: str = ""
    sha256: Optional[Sha256] = None
    kind: Literal["article", "symmetric", "query"]
    dim: Annotated[int, Field(ge=1, le=MAX_DIM)]
    normalize: bool = True


class IndexEntry(Strict):
    """The dense index's settings (``normalized``: vectors are unit length; absent before it was recorded)."""

    dtype: Literal["int8", "float32"]
    M: Annotated[int, Field(ge=2, le=4096)]
    ef_construction: Annotated[int, Field(ge=1, le=1 << 20)]
    space: Literal["ip"] = "ip"
    normalized: bool = True


class Counts(Strict):
    documents: Count
    chunks: Count
    sections: Count
    deleted_chunks: Count = 0


class FileEntry(Strict):
    """What a file held when written: size, sha256, crc32 (the cheap check), lines (JSONL)."""

    bytes: Count
    sha256: Sha256
    crc32: Optional[Annotated[int, Field(ge=0, lt=1 << 32)]] = None
    lines: Optional[Count] = None


class MetadataEntry(Strict):
    """The documents' metadata fields a filter may name, name -> type (``medretrieve.filters.FIELD_TYPES``);
    ``declared``: given at build time (kept by later writes) rather than inferred from the documents."""

    fields: Dict[str, Literal["keyword", "keywords", "integer", "float", "date", "boolean"]]
    declared: bool = False


class CollectionManifest(Strict):
    """The validated manifest (module docstring); :meth:`to_dict` gives the JSON object back."""

    format: Literal["medretrieve-collection-1"]
    encoder: EncoderEntry
    query_encoder: Optional[EncoderEntry] = None
    chunking: Annotated[ChunkingConfig, AfterValidator(_safe_chunking)]
    index: IndexEntry
    versions: Dict[str, str] = Field(default_factory=dict)
    created: Optional[str] = None
    read_report: Optional[Dict[str, Any]] = None
    counts: Optional[Counts] = None
    files: Optional[Dict[RelPath, FileEntry]] = None
    metadata: Optional[MetadataEntry] = None

    @model_validator(mode="after")
    def _agree(self) -> "CollectionManifest":
        q = self.query_encoder
        if self.encoder.kind == "query":
            raise ValueError("encoder.kind: the article encoder cannot be a query model")
        if q is not None and q.dim != self.encoder.dim:
            raise ValueError(f"query_encoder.dim {q.dim} differs from encoder.dim {self.encoder.dim}")
        if q is not None and q.normalize != self.encoder.normalize:
            raise ValueError("query_encoder.normalize differs from encoder.normalize: one geometry per collection")
        if self.index.normalized != self.encoder.normalize:
            raise ValueError(f"index.normalized {self.index.normalized} differs from encoder.normalize "
                             f"{self.encoder.normalize}")
        return self

    def to_dict(self) -> Dict[str, Any]:
        """The manifest as a JSON object (unknown fields kept as they were read)."""
        return self.model_dump(mode="json")

    def file(self, name: str) -> Optional[Dict[str, Any]]:
        """The digest recorded for ``name`` (a path relative to the collection), None when none is."""
        entry = (self.files or {}).get(name)
        return None if entry is None else entry.model_dump(exclude_none=True)

    @property
    def total_bytes(self) -> int:
        """Bytes of every file the manifest lists (what a full check would hash)."""
        return sum(f.bytes for f in (self.files or {}).values())


M = TypeVar("M", bound=BaseModel)


def parse_model(model: Type[M], data: bytes, where: Path, wrong_format: str) -> M:
    """``model`` parsed from the JSON bytes ``data`` (the content of ``where``) in strict mode; DamagedCollection
    naming ``where`` and the field at fault (``wrong_format.format(value)`` when it is the ``format`` field)."""
    try:
        return model.model_validate_json(data, strict=True)
    except ValidationError as exc:
        raise DamagedCollection(f"{where}: {_first_error(exc, wrong_format)}") from None


def parse_manifest(data: bytes, where: Path) -> CollectionManifest:
    """The manifest in ``data`` (the bytes of ``where``); DamagedCollection naming the field at fault."""
    return parse_model(CollectionManifest, data, where, "unknown collection format {!r} (expected " + FORMAT + ")")


def validate_manifest(value: Dict[str, Any], where: Path) -> CollectionManifest:
    """A manifest a writer made (a dict), checked as :func:`parse_manifest` checks one read from disk, so no write
    can leave a manifest the next open refuses."""
    return parse_manifest(json.dumps(value).encode("utf-8"), where)


def read_manifest(directory: Path) -> CollectionManifest:
    """The validated manifest of ``directory``: FileNotFoundError when there is none (not a collection),
    DamagedCollection when it is over :data:`~.store.MANIFEST_MAX_BYTES`, not JSON, or a field is wrong."""
    path = directory / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a medretrieve collection (no {MANIFEST})")
    size = path.stat().st_size
    if size > MANIFEST_MAX_BYTES:
        raise DamagedCollection(f"{path} holds {size} bytes; a manifest is at most {MANIFEST_MAX_BYTES} bytes")
    return parse_manifest(path.read_bytes(), path)


def _first_error(exc: ValidationError, wrong_format: str) -> str:
    """``field.path: message (got <value>)`` for the first error pydantic found, plus how many more; a wrong
    ``format`` first, as ``wrong_format`` says it (the file is not what it should be)."""
    errors = exc.errors(include_url=False)
    formats = [e for e in errors if e["loc"] == ("format",)]
    if formats:
        got = formats[0].get("input")
        return wrong_format.format(got if isinstance(got, str) and len(got) <= 60 else type(got).__name__)
    e = errors[0]
    loc = ".".join(str(p) for p in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    got = e.get("input")
    shown = "" if e["type"] in ("json_invalid", "missing") or isinstance(got, (dict, list)) \
        else f" (got {str(got)[:60]!r})"
    more = f"; {len(errors) - 1} more problem(s)" if len(errors) > 1 else ""
    return f"{loc + ': ' if loc else ''}{msg}{shown}{more}"
