"""Hostile and damaged collections: manifests that point outside the folder or hold the wrong types, files damaged
where no digest is checked, model files shared with other places, builds on binary input.

Every case ends in a :class:`DamagedCollection` (or a ``SourceError``) naming the field, file or line at fault,
never a bare ``TypeError``/``KeyError``/``EOFError``, never a read outside the collection folder.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from medretrieve import DamagedCollection
from medretrieve.corpus.collection import Collection
from medretrieve.corpus.sources import SourceError

DOCS = [{"id": f"d{i}", "title": f"Topic {i}",
         "sections": [{"title": "Treatment", "text": f"Drug number {i} treats condition {i} at dose {i} mg."},
                      {"title": "Symptoms", "text": f"Condition {i} causes fever and a rash on day {i}."}]}
        for i in range(6)]

# ------------------------------------------------------------------ every file a step opens, seen by an audit hook
_OPENED: list = []
_WATCH = [False]


def _audit(event: str, args: tuple) -> None:
    if _WATCH[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextmanager
def opened_files():
    """The paths Python opened inside the block (``open``, ``np.load``, ``mmap`` sources...)."""
    _OPENED.clear()
    _WATCH[0] = True
    try:
        yield _OPENED
    finally:
        _WATCH[0] = False


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "col"
    Collection.build(DOCS, out, encoder="default", progress=False)
    return out


@pytest.fixture
def col(built, tmp_path):
    copy = tmp_path / "box" / "col"
    shutil.copytree(built, copy)
    return copy


def _manifest(col: Path) -> dict:
    return json.loads((col / "manifest.json").read_text())


def _write_manifest(col: Path, m) -> None:
    (col / "manifest.json").write_text(m if isinstance(m, str) else json.dumps(m))


# ------------------------------------------------------------------ finding 9: nothing outside the folder is read


@pytest.mark.parametrize("name", ["../secret.txt", "../../box/secret.txt", "rows/../../secret.txt", "/ABS/secret.txt",
                                  "../missing.txt", "/ABS/missing.txt", "lexical\\..\\..\\secret.txt", ""])
def test_a_files_entry_outside_the_folder_is_refused_unread(col, name):
    secret = col.parent / "secret.txt"
    secret.write_text("patient 4711: HIV positive")
    name = name.replace("/ABS", str(col.parent))
    m = _manifest(col)
    m["files"][name] = dict(m["files"]["chunks.jsonl"])
    _write_manifest(col, m)
    with opened_files() as seen, pytest.raises(DamagedCollection) as err:
        Collection.open(col, verify=True)
    msg = str(err.value)
    assert "files" in msg and "outside the collection" in msg
    assert "4711" not in msg and "HIV" not in msg and "26 bytes" not in msg and "exist" not in msg
    assert [p for p in seen if not Path(p).resolve().is_relative_to(col.resolve())] == []


def test_the_error_does_not_tell_whether_the_outside_file_exists(col):
    (col.parent / "there.txt").write_text("x" * 100)
    messages = []
    original = _manifest(col)
    for name in ("../there.txt", "../not-there.txt"):
        m = json.loads(json.dumps(original))
        m["files"] = {name: m["files"]["chunks.jsonl"]}
        _write_manifest(col, m)
        with pytest.raises(DamagedCollection) as err:
            Collection.open(col)
        messages.append(str(err.value).replace("not-there", "there"))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("target", ["sections.jsonl", "lexical", "models", "manifest.json", "rows/offsets.npy"])
def test_a_link_that_leaves_the_folder_is_refused(col, target):
    """The link's target is a byte-for-byte copy, so every digest would still match: only the link is wrong."""
    outside = col.parent / f"outside-{target.replace('/', '-')}"
    shutil.move(str(col / target), str(outside))
    os.symlink(outside, col / target)
    link = target.replace("/", ".")
    with opened_files() as seen, pytest.raises(DamagedCollection, match=f"{link} is a link that leads out"):
        Collection.open(col)
    assert [p for p in seen if "outside-" in p] == []


def test_a_link_inside_the_folder_is_fine(col):
    shutil.move(str(col / "sections.jsonl"), str(col / "rows" / "sections.copy"))
    os.symlink("rows/sections.copy", col / "sections.jsonl")
    assert len(Collection.open(col, verify=True).sections) == len(DOCS) * 2


@pytest.mark.parametrize("key", ["encoder", "query_encoder"])
def test_a_model_directory_must_be_inside_the_folder_and_hold_a_model(col, key):
    m = _manifest(col)
    m[key] = dict(m["encoder"])
    if key == "query_encoder":
        m[key]["kind"] = "symmetric"
    for bad, why in (("/usr/lib", "outside the collection"), ("../../..", "outside the collection"),
                     ("rows", "holds no model")):
        m[key]["dir"] = bad
        _write_manifest(col, m)
        with pytest.raises(DamagedCollection, match=f"{key}.dir.*{why}"):
            Collection.open(col)


# ------------------------------------------------------------------ finding 10: typed, validated manifests


@pytest.mark.parametrize("path,value,field", [
    (("encoder", "dim"), -3, "encoder.dim"),
    (("encoder", "dim"), 0, "encoder.dim"),
    (("encoder", "dim"), "384", "encoder.dim"),
    (("encoder", "dim"), 384.0, "encoder.dim"),
    (("encoder", "dim"), 10 ** 9, "encoder.dim"),
    (("encoder", "dim"), None, "encoder.dim"),
    (("encoder", "dim"), 512, "encoder.dim is 512"),  # well-typed, but not what the index holds
    (("index", "dtype"), "int4", "index.dtype"),
    (("index", "dtype"), "float32", "index.dtype is 'float32'"),  # the index file holds int8
    (("index", "space"), "l2", "index.space"),
    (("index", "M"), 1, "index.M"),
    (("index", "normalized"), "yes", "index.normalized"),
    (("encoder",), [], "encoder"),
    (("encoder", "kind"), "cross", "encoder.kind"),
    (("chunking",), "x", "chunking"),
    (("chunking", "max_tokens"), 3, "chunking"),
    (("chunking", "overlap"), float("nan"), "chunking"),
    (("chunking", "complex_title_pattern"), "(a+)+$", "complex_title_pattern"),
    (("counts", "chunks"), -1, "counts.chunks"),
    (("counts",), {"chunks": 1}, "counts.documents"),
    (("files",), [], "files"),
    (("files", "chunks.jsonl", "bytes"), "12", "files.chunks.jsonl.bytes"),
    (("files", "chunks.jsonl", "sha256"), "zz", "files.chunks.jsonl.sha256"),
    (("versions",), {"numpy": 1}, "versions.numpy"),
    (("format",), "medretrieve-collection-9", "unknown collection format 'medretrieve-collection-9'"),
])
def test_a_wrong_field_is_named(col, path, value, field):
    m = _manifest(col)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    _write_manifest(col, m)
    with pytest.raises(DamagedCollection, match=field.replace(".", r"\.").replace("(", r"\(")):
        Collection.open(col)


@pytest.mark.parametrize("text,why", [
    ("[]", "manifest"),
    ("null", "manifest"),
    ('{"format": "medretrieve-collection-1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON"),
    ('{"format": "medretrieve-collection-1", "counts": {"chunks": 1' + "0" * 5000 + "}}", "JSON"),
    (b"\xff\xfe{}", "JSON"),
    ("{" + " " * (17 << 20) + "}", "bytes"),
])
def test_a_manifest_that_is_no_manifest(col, text, why):
    (col / "manifest.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DamagedCollection, match=why):
        Collection.open(col)


def _json_values():
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                        st.text(max_size=20), st.sampled_from(["..", "/etc/passwd", "rows", "int8", "ip", "", "0"]))
    return st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                        st.dictionaries(st.text(max_size=8), kids, max_size=3)),
                        max_leaves=8)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@st.composite
def _mutated(draw, original):
    m = json.loads(json.dumps(original))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(m) if p]
        path = draw(st.sampled_from(paths))
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(_json_values())
        else:
            parent[path[-1]] = draw(_json_values())
    return m


@pytest.fixture(scope="module")
def fuzz_col(built, tmp_path_factory):
    copy = tmp_path_factory.mktemp("fuzz") / "col"
    shutil.copytree(built, copy)
    return copy


def _open_and_read(col: Path) -> None:
    c = Collection.open(col, verify=False)
    assert len(c.rows) == len(c.alive)
    c.lexical.search("fever", k=3)
    c.dense.search(c.vectors([0]), k=2)
    assert c.rows[0].document_id and isinstance(c.sections, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_manifest_opens_soundly_or_is_damaged(fuzz_col, data):
    original = _manifest(fuzz_col) if not (fuzz_col / "manifest.orig").exists() else \
        json.loads((fuzz_col / "manifest.orig").read_text())
    (fuzz_col / "manifest.orig").write_text(json.dumps(original))
    m = data.draw(_mutated(original))
    try:
        _write_manifest(fuzz_col, m)
        with opened_files() as seen:
            try:
                _open_and_read(fuzz_col)
            except DamagedCollection:
                pass
        assert [p for p in seen if not Path(p).resolve().is_relative_to(fuzz_col.resolve())] == []
    finally:
        _write_manifest(fuzz_col, original)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json_values())
def test_any_json_as_a_manifest_is_damaged(fuzz_col, value):
    original = (fuzz_col / "manifest.json").read_bytes()
    try:
        _write_manifest(fuzz_col, json.dumps(value))
        with pytest.raises(DamagedCollection):
            Collection.open(fuzz_col)
    finally:
        (fuzz_col / "manifest.json").write_bytes(original)


# ------------------------------------------------------------------ finding 11: damage found without digests


def _drop_entry(col: Path, name: str) -> None:
    """As a collection written before ``name`` was listed: only the structural checks are left for it."""
    m = _manifest(col)
    m["files"].pop(name)
    _write_manifest(col, m)


@pytest.mark.parametrize("listed", [True, False])
@pytest.mark.parametrize("name", ["rows/labels.npy", "rows/offsets.npy", "lexical/ids.npy", "lexical/tokens.npy",
                                  "lexical/matrix/data.npy", "lexical/matrix/indptr.npy"])
def test_a_truncated_array_is_named_without_digests(col, name, listed):
    path = col / name
    path.write_bytes(path.read_bytes()[:-5])
    if not listed:
        _drop_entry(col, name)
    with pytest.raises(DamagedCollection, match=name.replace("/", ".")):
        Collection.open(col, verify=False)


@pytest.mark.parametrize("name", ["lexical/vocab.json", "lexical/lexical.json", "lexical/matrix/indices.npy",
                                  "rows/documents.json", "sections.jsonl"])
def test_a_missing_file_is_named_without_digests(col, name):
    (col / name).unlink()
    with pytest.raises(DamagedCollection, match=f"{name}.* missing"):
        Collection.open(col, verify=False)


@pytest.mark.parametrize("listed", [True, False])
def test_a_flipped_byte_in_the_sections_is_named_at_first_read(col, listed):
    data = bytearray((col / "sections.jsonl").read_bytes())
    data[data.index(b"fever")] = 0xFF  # no longer UTF-8
    (col / "sections.jsonl").write_bytes(bytes(data))
    if not listed:
        _drop_entry(col, "sections.jsonl")
    opened = Collection.open(col, verify=False)
    with pytest.raises(DamagedCollection, match="sections.jsonl" + (" does not match" if listed else " line")):
        opened.sections


@pytest.mark.parametrize("flip,listed", [(0xFF, True), (ord("x"), True), (0xFF, False)])
def test_a_flipped_byte_in_a_chunk_text_is_named_with_its_row(col, flip, listed):
    """Invalid UTF-8 or a letter changed in valid text: the line's crc32 catches both; without the crc32s (a
    collection written before them) the decode error still names the line."""
    data = bytearray((col / "chunks.jsonl").read_bytes())
    at = data.index(b"rash")
    row = data[:at].count(b"\n")
    data[at] = flip
    (col / "chunks.jsonl").write_bytes(bytes(data))
    if not listed:
        (col / "rows" / "crc.npy").unlink()
        _drop_entry(col, "rows/crc.npy")
    opened = Collection.open(col, verify=False)  # the size is right: only reading the row finds it
    opened.rows[row - 1 if row else row + 1]  # its neighbours read fine
    why = "does not match its crc32" if listed else "is not UTF-8"
    with pytest.raises(DamagedCollection, match=f"chunks.jsonl line {row + 1} \\(row {row}\\) {why}"):
        opened.rows[row]


@pytest.mark.parametrize("name,offset_of", [
    ("lexical/matrix/data.npy", lambda a: 3),  # the sign and exponent byte of the first weight
    ("lexical/matrix/indices.npy", lambda a: 3),  # the high byte of the first posting's row
    ("lexical/matrix/indptr.npy", lambda a: 8 * (len(a) // 2) + 6),  # a column pointer far out of order
    ("lexical/tokens.npy", lambda a: 4 * (len(a) // 2) + 3),  # a token id far outside the vocabulary
    ("lexical/token_offsets.npy", lambda a: 8 * (len(a) // 2) + 5),
])
def test_a_flipped_byte_in_the_bm25_arrays_is_caught_without_digests(col, name, offset_of):
    path = col / name
    array = np.load(path)
    raw = bytearray(path.read_bytes())
    header = len(raw) - array.nbytes
    raw[header + offset_of(array)] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DamagedCollection, match="lexical"):
        opened = Collection.open(col, verify=False)
        for word in ("drug", "number", "fever", "rash", "condition", "dose", "treats", "topic", "mg", "day"):
            opened.lexical.search(word, k=50)


def test_a_verify_value_that_is_not_one_is_refused(col):
    with pytest.raises(ValueError, match="verify must be"):
        Collection.open(col, verify="yes")


# ------------------------------------------------------------------ finding 13: own model copies, clean failures


def test_model_files_are_copies_owned_by_the_collection(tmp_path):
    from medretrieve.models.encoders import default_model_dir

    model = tmp_path / "model"
    shutil.copytree(default_model_dir(), model)
    assert (default_model_dir() / "model.onnx").stat().st_nlink == 1  # the cache holds its own copy too
    col = Collection.build(DOCS[:3], tmp_path / "col", encoder=model, progress=False)
    mine = tmp_path / "col" / "models" / "encoder" / "model.onnx"
    assert mine.stat().st_nlink == 1 and mine.stat().st_ino != (model / "model.onnx").stat().st_ino
    before = mine.read_bytes()
    with open(model / "model.onnx", "r+b") as fh:  # edited in place where it came from
        fh.write(b"\0" * 16)
    assert mine.read_bytes() == before
    col.add([DOCS[4]])
    col.delete("d0")
    assert mine.stat().st_nlink == 1 and mine.read_bytes() == before
    col.save(tmp_path / "elsewhere")  # a copy saved elsewhere shares no model file with this one
    assert (tmp_path / "elsewhere" / "models" / "encoder" / "model.onnx").stat().st_nlink == 1


@pytest.mark.parametrize("content", [os.urandom(3000), b'{"id": "a", "text": "fine"}\n\xff\xfe{"id": "b"}\n'])
def test_a_build_on_binary_input_names_the_file_and_line_and_leaves_nothing(tmp_path, content):
    src = tmp_path / "input.jsonl"
    src.write_bytes(content)
    line = content.split(b"\n").index(next(x for x in content.split(b"\n") if b"\xff" in x or not x.isascii())) + 1
    target = tmp_path / "col"
    Collection.build(DOCS[:2], target, encoder="default", progress=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SourceError, match=f"input.jsonl:{line}: not UTF-8"):
        Collection.build(src, target, encoder="default", progress=False, errors="raise", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no .col.build left, the old collection kept
    assert Collection.open(target).n_documents == 2
    if content.startswith(b"{"):
        return
    with pytest.raises(ValueError, match=f"no readable records.*input.jsonl:{line}: not UTF-8"):
        Collection.build(src, tmp_path / "other", encoder="default", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_collection_without_line_crcs_gets_them_on_its_next_write(col):
    (col / "rows" / "crc.npy").unlink()
    _drop_entry(col, "rows/crc.npy")
    c = Collection.open(col)
    c.add([{"id": "new", "title": "New", "text": "A new document about drug number 9."}])
    assert (col / "rows" / "crc.npy").is_file()
    back = Collection.open(col, verify=True)
    assert back.check()["chunks"] == len(back.rows) and back.rows.crc is not None
