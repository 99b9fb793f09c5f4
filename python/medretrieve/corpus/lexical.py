"""BM25 lexical search with biomedical-aware tokenisation, in numpy alone.

BM25 here follows bm25s's formula and arithmetic (method "lucene"), which it replaced: every (row, term) weight
is computed once at fit time, and a query over a whole collection is a sum of matrix columns, fast enough for the
first stage of a search under a deadline, with no scipy or sparse package loaded.

Tokenisation (:func:`tokenize`): lower-cased; a token is a run of letters /
digits joined by ``-`` or ``/`` (and ``.`` between digits), so gene, protein
and drug names stay whole ("IL-6", "BRCA1", "COVID-19", "TNF-alpha", "5-HT",
"2.5"); a hyphenated or slashed token also yields its parts of 3+ characters that hold a
letter ("tnf", "alpha"; "anti-CCR4" -> "ccr4", "MIC-1/GDF15" -> "gdf15") so "TNF alpha" and
"CCR4" still match, and a hyphenated code with digits also yields its hyphen-free form
("cpx-351" -> "cpx351", "il-6" -> "il6"); stopwords are dropped; purely
alphabetic tokens are Snowball-stemmed (PyStemmer) when ``stem=True``; tokens
with digits or hyphens are never stemmed. :data:`TOKENIZER_VERSION` is stored with an
index; ``Collection.open`` re-tokenises a collection indexed by an older version.

Incremental add and delete: ``add`` re-fits BM25 over all kept token lists
(the statistics depend on the whole corpus; a re-fit of 100k chunks takes a
few seconds); ``delete`` only masks rows (they score 0 and are never
returned) and the next ``add`` or ``save`` drops them for good.

Fitting computes every (row, term) BM25 weight once, into a sparse term-major
matrix (:class:`BM25Matrix`); a query's scores are then sums of the matrix's
columns. On disk (``format: medretrieve-lexical-2``) an
index is what it needs to answer at once, memory-mapped: the matrix
(``matrix/``), the token lists as ids into a vocabulary (``tokens.npy`` +
``token_offsets.npy`` + ``vocab.json``) and the row ids (``ids.npy``), so opening
a collection costs milliseconds, not a re-fit. Indexes written in the first
format (one JSON file) still load.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Iterable, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
from pydantic import Field

from .._files import read_json
from .manifest import Count, Strict, parse_model
from .store import DamagedCollection, load_array

# bumped whenever tokenize() changes what it emits (stored token lists must then be rebuilt)
TOKENIZER_VERSION = 2

_TOKEN_RE = re.compile(r"[^\W_]+(?:(?:[-/]|(?<=\d)\.(?=\d))[^\W_]+)*")

# Lucene's English stop set (the list bm25s ships as STOPWORDS_EN, which the BM25 here was checked against)
_LUCENE_STOPWORDS = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
)

_EXTRA_STOPWORDS = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "does", "do", "did", "is", "are",
    "was", "were", "can", "could", "should", "would", "may", "might", "list", "describe", "name", "there",
    "been", "being", "has", "have", "had", "also", "their", "its", "these", "those", "than", "then", "via",
}


@lru_cache(maxsize=1)
def stopwords() -> frozenset:
    """English stopwords (Lucene's list plus question words)."""
    return frozenset(_LUCENE_STOPWORDS) | frozenset(_EXTRA_STOPWORDS)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def raw_tokens(text: str) -> List[str]:
    """Lower-cased biomedical tokens, no stopword removal or stemming."""
    return [m.group(0).lower() for m in _TOKEN_RE.finditer(text)]


def word_tokens(text: str, stem: bool = True, remove_stopwords: bool = True) -> List[Tuple[str, List[str]]]:
    """Each raw token of ``text`` (:func:`raw_tokens`) with the BM25 tokens it yields (none for a stopword).

    This is the one tokenising pass: :func:`tokenize` flattens it, and a search analyses its question with it
    once (``retrieval.query``) so the per-word view (subject words, abbreviations) needs no second pass.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    sw = stopwords() if remove_stopwords else frozenset()
    stemmer = _stemmer() if stem else None
    out: List[Tuple[str, List[str]]] = []
    for tok in raw_tokens(text):
        if tok in sw or (len(tok) == 1 and tok.isalpha()):
            out.append((tok, []))
            continue
        if tok.isalpha():
            out.append((tok, [stemmer.stemWord(tok) if stemmer else tok]))
            continue
        toks = [tok]
        if "-" in tok and any(c.isdigit() for c in tok):
            # codes are written with and without the hyphen ("CPX-351" / "CPX351", "IL-6" / "IL6")
            toks.append(tok.replace("-", ""))
        if "-" in tok or "/" in tok:
            for part in re.split(r"[-/]", tok):
                if len(part) < 3 or part in sw or not any(c.isalpha() for c in part):
                    continue
                toks.append(stemmer.stemWord(part) if stemmer and part.isalpha() else part)
        out.append((tok, toks))
    return out


def tokenize(text: str, stem: bool = True, remove_stopwords: bool = True) -> List[str]:
    """Tokens of ``text`` for BM25 (see module docstring)."""
    return [t for _, toks in word_tokens(text, stem, remove_stopwords) for t in toks]


def _is_identity(ids: np.ndarray) -> bool:
    """Whether ``ids`` are 0, 1, 2, ... (one pass, at fit or load)."""
    return bool(len(ids) == 0 or (ids[0] == 0 and ids[-1] == len(ids) - 1 and np.all(np.diff(ids) == 1)))


def bm25_idf(df: np.ndarray, n: int) -> np.ndarray:
    """BM25 idf of terms with document frequencies ``df`` among ``n`` rows, ``log(1 + (n - df + 0.5) / (df + 0.5))``,
    float32 as bm25s stores it (0 for a term no row holds)."""
    df = np.asarray(df, dtype=np.int64)
    idf = np.zeros(df.shape, dtype=np.float32)
    seen = df > 0
    idf[seen] = np.log(1.0 + (n - df[seen] + 0.5) / (df[seen] + 0.5))
    return idf


def bm25_weights(idf: np.ndarray, tf: np.ndarray, lengths: np.ndarray, avg_len: float, k1: float, b: float
                 ) -> np.ndarray:
    """The BM25 weight of terms (float32 ``idf``) occurring ``tf`` times in rows of ``lengths`` tokens:
    ``idf * tf / (k1 * (1 - b + b * length / avg_len) + tf)`` in float64, rounded to float32 (bm25s's arithmetic)."""
    tf = np.asarray(tf, dtype=np.float64)
    norm = k1 * ((1 - b) + b * np.asarray(lengths) / avg_len) + tf
    return (np.asarray(idf).astype(np.float64) * (tf / norm)).astype(np.float32)


def bm25_from_counts(times: Sequence[int], tf: np.ndarray, lengths: np.ndarray, df: np.ndarray, n: int,
                     avg_len: float, k1: float, b: float) -> np.ndarray:
    """BM25 scores of rows from their term counts, bit for bit what a matrix fitted over ``n`` rows of average
    length ``avg_len`` answers (:meth:`BM25Matrix.scores`): ``tf`` [rows, terms] counts of the query's distinct
    terms (in the order the query first names them), ``times`` how often the query names each, ``df`` their
    document frequencies, ``lengths`` the rows' token counts. What a sharded search computes from each shard's
    counts with the statistics of all shards, so scores from different shards compare."""
    tf = np.asarray(tf).reshape(len(lengths), len(times))
    idf = bm25_idf(df, n)
    out = np.zeros(len(lengths), dtype=np.float32)
    for j, t in enumerate(times):
        hit = tf[:, j] > 0
        if hit.any():
            out[hit] += t * bm25_weights(idf[j], tf[hit, j], np.asarray(lengths)[hit], avg_len, k1, b)
    return out


def _row_term_counts(flat: np.ndarray, offsets: np.ndarray, a: int, z: int, width: int
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (row, token id, count) of rows ``a..z-1`` of a flat token-id array, sorted by row then token."""
    seg = np.asarray(flat[offsets[a]:offsets[z]], dtype=np.int64)
    rows = np.repeat(np.arange(a, z, dtype=np.int64), np.diff(offsets[a:z + 1]))
    keys, counts = np.unique((rows - a) * width + seg, return_counts=True)
    return keys // width + a, keys % width, counts


class BM25Matrix:
    """Precomputed BM25 weights, term-major (CSC): the rows holding term ``c`` are
    ``indices[indptr[c]:indptr[c + 1]]`` with weights ``data[...]``; ``vocab`` maps a token to its column."""

    FILES = ("data", "indices", "indptr")

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, vocab: dict, num_docs: int):
        self.data, self.indices, self.indptr, self.vocab, self.num_docs = data, indices, indptr, vocab, num_docs
        # a matrix read from files has each column checked the first time it is read (None: fitted here, sound)
        self._checked: Optional[np.ndarray] = None
        self._where: Optional[Path] = None

    def _column(self, c: int) -> Tuple[np.ndarray, np.ndarray]:
        """Rows and weights of column ``c``. A loaded matrix's column is checked once, on its first read: rows in
        range, weights finite and in ``(0, max idf]`` (a BM25 weight is ``idf * tf / (norm + tf) <= idf``), so a
        flipped byte in the weight or row arrays is caught where it is read, at the cost of one pass over the
        postings a search reads anyway, instead of a pass over every posting at open."""
        a, z = int(self.indptr[c]), int(self.indptr[c + 1])
        rows, weights = self.indices[a:z], self.data[a:z]
        if self._checked is not None and not self._checked[c]:
            bound = np.float32(np.log1p((self.num_docs - 0.5) / 1.5) * (1 + 1e-5))
            if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.num_docs
                              or not bool(((weights > 0) & (weights <= bound)).all())):
                raise DamagedCollection(f"{self._where}: column {c} of the BM25 matrix holds rows or weights no fit "
                                        "gives (a flipped byte in data.npy or indices.npy); the lexical index is "
                                        "damaged: rebuild the collection or restore the files")
            self._checked[c] = True
        return rows, weights

    @classmethod
    def fit(cls, token_lists: List[List[str]], k1: float, b: float) -> "BM25Matrix":
        """The matrix of ``token_lists`` (one list of tokens per row); see :meth:`fit_ids`."""
        store = TokenStore()
        store.extend(token_lists)
        return cls.fit_ids(store.flat, store.offsets, store.vocab, k1, b)

    @classmethod
    def fit_ids(cls, flat: np.ndarray, offsets: np.ndarray, vocab: Sequence[str], k1: float, b: float,
                directory: Optional[Path] = None, block_rows: int = 65_536) -> "BM25Matrix":
        """The matrix of rows given as token ids (row ``i``: ``flat[offsets[i]:offsets[i + 1]]``, ids into
        ``vocab``; column ``c`` is token ``vocab[c]``), computed with numpy ``block_rows`` rows at a time.

        bm25s's formula and arithmetic (method "lucene": ``idf = log(1 + (N - df + 0.5) / (df + 0.5))`` stored as
        float32, ``weight = idf * tf / (k1 * (1 - b + b * len / avg_len) + tf)`` in float64, stored as float32), so
        the scores are bm25s's; but no Python list of token strings is ever built (bm25s's fit holds every token of
        the corpus as a Python object: gigabytes at a million chunks) and the arrays can be written straight into
        ``directory`` (memory-mapped ``.npy`` files, what :meth:`save` writes). Memory beyond the result: the
        per-row lengths (8 bytes a row), the document frequencies (8 bytes a token) and one block of rows.
        """
        n = len(offsets) - 1
        width = len(vocab)
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        df = np.zeros(width, dtype=np.int64)
        for a in range(0, n, block_rows):
            _, toks, _ = _row_term_counts(flat, offsets, a, min(a + block_rows, n), width)
            df += np.bincount(toks, minlength=width)
        indptr = np.zeros(width + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        data: np.ndarray
        indices: np.ndarray
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            data = np.lib.format.open_memmap(directory / "data.npy", mode="w+", dtype=np.float32, shape=(nnz,))
            indices = np.lib.format.open_memmap(directory / "indices.npy", mode="w+", dtype=np.int32, shape=(nnz,))
            np.save(directory / "indptr.npy", indptr)
        else:
            data, indices = np.empty(nnz, dtype=np.float32), np.empty(nnz, dtype=np.int32)
        idf = bm25_idf(df, n)
        avg_len = float(lengths.mean()) if n else 0.0
        fill = indptr[:-1].copy()
        for a in range(0, n, block_rows):
            rows, toks, tf = _row_term_counts(flat, offsets, a, min(a + block_rows, n), width)
            order = np.lexsort((rows, toks))  # by token, then row: each column's rows in ascending order
            rows, toks, tf = rows[order], toks[order], tf[order]
            weights = bm25_weights(idf[toks], tf, lengths[rows], avg_len, k1, b)
            starts = np.flatnonzero(np.r_[True, toks[1:] != toks[:-1]])
            rank = np.arange(len(toks)) - np.repeat(starts, np.diff(np.r_[starts, len(toks)]))
            where = fill[toks] + rank
            data[where] = weights
            indices[where] = rows
            fill += np.bincount(toks, minlength=width)
        for array in (data, indices):
            if isinstance(array, np.memmap):
                array.flush()
        return cls(data, indices, indptr, {t: c for c, t in enumerate(vocab)}, n)

    def check(self) -> None:
        """Every column at once as :meth:`_column` checks one (a pass over every posting: for a full check)."""
        if self._checked is None or self._checked.all():
            return
        bound = np.float32(np.log1p((self.num_docs - 0.5) / 1.5) * (1 + 1e-5))
        for a in range(0, len(self.data), 1 << 24):  # a block at a time: bounded memory at any size
            rows, weights = self.indices[a:a + (1 << 24)], self.data[a:a + (1 << 24)]
            if int(rows.min()) < 0 or int(rows.max()) >= self.num_docs \
                    or not bool(((weights > 0) & (weights <= bound)).all()):
                raise DamagedCollection(f"{self._where}: postings {a}..{a + len(rows)} of the BM25 matrix hold rows "
                                        "or weights no fit gives; the lexical index is damaged: rebuild the "
                                        "collection or restore the files")
        self._checked[:] = True

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        """The BM25 score of every row for ``tokens`` (a token given twice counts twice), float32."""
        out = np.zeros(self.num_docs, dtype=np.float32)
        for token, times in Counter(tokens).items():
            c = self.vocab.get(token)
            if c is not None:
                rows, weights = self._column(c)
                out[rows] += times * np.asarray(weights, dtype=np.float32)
        return out

    def frequency(self, token: str) -> int:
        """How many rows hold ``token`` (its column's length)."""
        c = self.vocab.get(token)
        return 0 if c is None else int(self.indptr[c + 1] - self.indptr[c])

    def postings(self, token: str) -> np.ndarray:
        """The rows holding ``token``."""
        c = self.vocab.get(token)
        return np.zeros(0, dtype=np.int64) if c is None else np.asarray(self._column(c)[0])

    def save(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        for name in self.FILES:
            array, target = getattr(self, name), d / f"{name}.npy"
            if isinstance(array, np.memmap) and array.filename and Path(array.filename) == target.resolve():
                continue  # fitted straight into this file (fit_ids with directory=d)
            np.save(target, np.asarray(array))
        (d / "vocab.json").write_text(json.dumps({"num_docs": self.num_docs, "vocab": self.vocab},
                                                 ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, d: Path, mmap: bool) -> "BM25Matrix":
        """A matrix :meth:`save` wrote (arrays memory-mapped with ``mmap``), checked for shape and structure
        (``indptr`` rises from 0 to the number of postings, the vocabulary maps tokens to columns); the postings
        are checked a column at a time when read (:meth:`_column`). DamagedCollection naming the file at fault."""
        meta = read_json(d / "vocab.json")
        vocab = meta.get("vocab") if isinstance(meta, dict) else None
        num_docs = meta.get("num_docs") if isinstance(meta, dict) else None
        if not isinstance(vocab, dict) or not isinstance(num_docs, int) or isinstance(num_docs, bool) or num_docs < 0:
            raise DamagedCollection(f"{d / 'vocab.json'} does not hold a vocabulary and a row count")
        indptr = load_array(d / "indptr.npy", np.int64, mmap=mmap)
        columns = len(indptr) - 1
        data = load_array(d / "data.npy", np.float32, mmap=mmap)
        indices = load_array(d / "indices.npy", np.int32, len(data), mmap=mmap)
        if (columns < 0 or int(indptr[0]) != 0 or int(indptr[-1]) != len(data) or bool(np.any(np.diff(indptr) < 0))
                or any(not isinstance(c, int) or not 0 <= c < columns for c in vocab.values())):
            raise DamagedCollection(f"{d}: the BM25 matrix's column pointers or vocabulary are out of order or out of "
                                    "range; the lexical index is damaged")
        m = cls(data, indices, indptr, vocab, num_docs)
        m._checked = np.zeros(columns, dtype=bool)
        m._where = d
        return m


class TokenStore:
    """Token lists of many rows in two flat arrays (token ids into ``vocab`` and row offsets): compact, and
    memory-mappable once saved. ``get(i)`` gives row ``i``'s tokens back as strings."""

    def __init__(self, vocab: Optional[List[str]] = None, flat: Optional[np.ndarray] = None,
                 offsets: Optional[np.ndarray] = None) -> None:
        self.vocab: List[str] = vocab if vocab is not None else []
        self.flat = flat if flat is not None else np.zeros(0, dtype=np.int32)
        self.offsets = offsets if offsets is not None else np.zeros(1, dtype=np.int64)
        self._index: Optional[dict] = None  # token -> id, built when tokens are added

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, i: int) -> List[str]:
        v = self.vocab
        return [v[t] for t in self.flat[self.offsets[i]:self.offsets[i + 1]].tolist()]

    def lists(self, rows: Iterable[int]) -> List[List[str]]:
        return [self.get(int(i)) for i in rows]

    def subset(self, rows: np.ndarray) -> "TokenStore":
        """A store of ``rows`` only (same vocabulary)."""
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = (np.concatenate([np.asarray(self.flat[a:b]) for a, b in zip(starts, ends)]).astype(np.int32)
                if len(rows) else np.zeros(0, dtype=np.int32))
        return TokenStore(self.vocab, flat, offsets)

    def extend(self, lists: Sequence[List[str]]) -> None:
        if self._index is None:
            self.vocab = list(self.vocab)
            self._index = {t: i for i, t in enumerate(self.vocab)}
        index, vocab = self._index, self.vocab
        ids: List[int] = []
        for toks in lists:
            for t in toks:
                j = index.get(t)
                if j is None:
                    j = index[t] = len(vocab)
                    vocab.append(t)
                ids.append(j)
        lengths = np.fromiter((len(t) for t in lists), dtype=np.int64, count=len(lists))
        self.flat = np.concatenate([np.asarray(self.flat, dtype=np.int32), np.asarray(ids, dtype=np.int32)])
        self.offsets = np.concatenate([np.asarray(self.offsets), self.offsets[-1] + np.cumsum(lengths)])


class LexicalSettings(Strict):
    """``lexical.json``: the format, tokenisation and BM25 settings, and the number of rows (format 2)."""

    format: Literal["medretrieve-lexical-1", "medretrieve-lexical-2"]
    stem: bool
    remove_stopwords: bool
    k1: Annotated[float, Field(gt=0, le=100)]
    b: Annotated[float, Field(ge=0, le=1)]
    tokenizer: Annotated[int, Field(ge=1)] = 1
    rows: Optional[Count] = None


class LexicalIndex:
    """BM25 over a set of rows (integer ids, e.g. chunk row numbers)."""

    FILE = "lexical.json"  # settings (and, in the first format, everything)

    def __init__(self, stem: bool = True, remove_stopwords: bool = True, k1: float = 1.5, b: float = 0.75) -> None:
        self.stem = stem
        self.remove_stopwords = remove_stopwords
        self.k1 = float(k1)
        self.b = float(b)
        self._ids = np.zeros(0, dtype=np.int64)  # row -> external id
        self._store = TokenStore()
        self._alive = np.zeros(0, dtype=bool)
        self._matrix: Optional[BM25Matrix] = None  # fitted over every row, in row order
        self._order = np.zeros(0, dtype=np.int64)
        self._stale = False  # rows were deleted since the fit: the next save re-fits without them
        self._token_ids: Optional[dict] = None  # token -> id in the store's vocabulary, built on first use
        self._identity = True  # row i holds id i (a collection's rows): masks over ids apply as they are
        self.tokenizer_version = TOKENIZER_VERSION  # of the stored token lists (older ones come from load)

    # ------------------------------------------------------------- building
    def __len__(self) -> int:
        return int(self._alive.sum())

    def copy(self) -> "LexicalIndex":
        """An index a writer may change (add, delete, save) without changing this one, which searches may still
        read: the arrays and the fitted matrix are shared (every change replaces them, none writes into them), the
        token store gets a vocabulary of its own the first time it grows."""
        new = LexicalIndex.__new__(LexicalIndex)
        new.__dict__.update(self.__dict__)
        new._store = TokenStore(self._store.vocab, self._store.flat, self._store.offsets)
        new._token_ids = None
        return new

    def add(self, texts: Sequence[str], ids: Iterable[int]) -> None:
        """Add rows (re-fits BM25 over every live row; deleted rows are dropped)."""
        ids_arr = np.asarray(list(ids), dtype=np.int64)
        if len(ids_arr) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(ids_arr)} ids")
        live_ids = set(self._ids[self._alive].tolist())
        dup = live_ids.intersection(ids_arr.tolist())
        if dup or len(set(ids_arr.tolist())) != len(ids_arr):
            raise ValueError(f"ids already present or repeated: {sorted(dup)[:5] or 'repeated in the batch'}")
        self._compact()
        self._store.extend([tokenize(t, self.stem, self.remove_stopwords) for t in texts])
        self._ids = np.concatenate([self._ids, ids_arr])
        self._alive = np.ones(len(self._ids), dtype=bool)
        self._fit()

    def _compact(self) -> None:
        """Drop deleted rows for good."""
        if self._alive.all():
            return
        keep = np.flatnonzero(self._alive)
        self._store = self._store.subset(keep)
        self._ids = self._ids[keep]
        self._alive = np.ones(len(keep), dtype=bool)

    def _fit(self) -> None:
        self._matrix = (BM25Matrix.fit_ids(self._store.flat, self._store.offsets, self._store.vocab, self.k1, self.b)
                        if len(self._store) else None)
        self._order = np.argsort(self._ids, kind="stable")  # for id -> row lookups
        self._identity = _is_identity(self._ids)
        self._stale = False
        self._token_ids = None  # the vocabulary may have grown

    def delete(self, ids: Iterable[int]) -> int:
        """Hide rows from search; returns how many were live."""
        mask = np.isin(self._ids, np.asarray(list(ids), dtype=np.int64)) & self._alive
        if mask.any():
            self._alive = self._alive.copy()  # a loaded index's array is read-only
            self._alive[mask] = False
            self._stale = True
        return int(mask.sum())

    # ------------------------------------------------------------- search
    def scores(self, query: Union[str, Sequence[str]], extra_tokens: Sequence[str] = ()) -> np.ndarray:
        """BM25 score of every row (0 for deleted rows), float32. ``query``: a text, or its tokens when the caller
        has them already (a search tokenises its question once). ``extra_tokens`` (already tokenised) join the
        query's tokens; a token given twice counts twice, which is how a query term is up-weighted."""
        if isinstance(query, str):
            query_tokens = tokenize(query, self.stem, self.remove_stopwords)
        elif isinstance(query, (list, tuple)) and all(isinstance(t, str) for t in query):
            query_tokens = list(query)
        else:
            raise TypeError(f"query must be a string or a list of tokens, got {type(query).__name__}")
        if self._matrix is None:
            return np.zeros(len(self._ids), dtype=np.float32)
        s = self._matrix.scores(query_tokens + list(extra_tokens))
        if self._stale:  # rows were deleted since the fit (the only way a row stops being live)
            s[~self._alive] = 0.0
        return s

    def idf(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 idf, ``log(1 + (n - df + 0.5) / (df + 0.5))``, of each (already tokenised) token over the live rows
        (document frequencies read from the fitted matrix's postings); an unseen token gets the idf of df = 0."""
        d = self.document_frequencies(tokens).astype(np.float64)
        n = len(self)
        return np.log1p((n - d + 0.5) / (d + 0.5))

    def document_frequencies(self, tokens: Sequence[str]) -> np.ndarray:
        """How many live rows hold each (already tokenised) token, int64."""
        d = np.zeros(len(tokens), dtype=np.int64)
        if self._matrix is not None:
            for i, t in enumerate(tokens):
                d[i] = (self._matrix.frequency(t) if not self._stale
                        else int(self._alive[self._matrix.postings(t)].sum()))
        return d

    def totals(self) -> Tuple[int, int]:
        """(live rows, their tokens in all): the statistics BM25 needs beside the document frequencies."""
        lengths = np.diff(np.asarray(self._store.offsets))
        return len(self), int(lengths[np.asarray(self._alive, dtype=bool)].sum()) if len(lengths) else 0

    def term_counts(self, ids: Union[Sequence[int], np.ndarray], tokens: Sequence[str]
                    ) -> Tuple[np.ndarray, np.ndarray]:
        """How often each of ``tokens`` occurs in the rows with external ``ids`` (int32 [len(ids), len(tokens)])
        and the rows' token counts (int64), read from the stored token ids (0 / 0 for unknown ids): with
        :func:`bm25_from_counts` and statistics from elsewhere, the BM25 score of these rows in a larger corpus."""
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        tf = np.zeros((len(wanted), len(tokens)), dtype=np.int32)
        lengths = np.zeros(len(wanted), dtype=np.int64)
        if not len(self._ids) or not len(wanted):
            return tf, lengths
        if self._token_ids is None:
            self._token_ids = {t: i for i, t in enumerate(self._store.vocab)}
        columns = np.array([self._token_ids.get(t, -1) for t in tokens], dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._ids, wanted, sorter=self._order), len(self._ids) - 1)
        rows = self._order[pos]
        offsets, flat = self._store.offsets, self._store.flat
        for i, (row, ok) in enumerate(zip(rows.tolist(), (self._ids[rows] == wanted).tolist())):
            if not ok:
                continue
            held = np.asarray(flat[offsets[row]:offsets[row + 1]])
            lengths[i] = len(held)
            if len(columns):
                tf[i] = (held[:, None] == columns[None, :]).sum(axis=0)
        return tf, lengths

    def scores_for(self, query: Union[str, Sequence[str], np.ndarray], ids: Sequence[int]) -> np.ndarray:
        """BM25 scores for the rows with external ``ids`` (0 for unknown or deleted ids); ``query`` is the query
        (text or tokens) or the vector :meth:`scores` already returned for it (no second scoring pass)."""
        s = np.asarray(query, dtype=np.float32) if isinstance(query, np.ndarray) else self.scores(query)
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.zeros(len(wanted), dtype=np.float32)
        if len(self._ids) == 0:
            return out
        pos = np.minimum(np.searchsorted(self._ids, wanted, sorter=self._order), len(self._ids) - 1)
        rows = self._order[pos]
        ok = self._ids[rows] == wanted
        out[ok] = s[rows[ok]]
        return out

    def check(self) -> None:
        """Check every posting of the BM25 matrix now (DamagedCollection), instead of each column when first read."""
        if self._matrix is not None:
            self._matrix.check()

    def has_exactly(self, ids: Union[Sequence[int], np.ndarray]) -> bool:
        """Whether the live rows are exactly ``ids`` (a consistency check against the collection's chunks)."""
        live = np.sort(self._ids[self._alive])
        return len(live) == len(ids) and bool(np.array_equal(live, np.sort(np.asarray(ids, dtype=np.int64))))

    def tokens_of(self, id: int) -> Optional[List[str]]:
        """The stored tokens of the live row with external ``id`` (None when unknown or deleted): what
        :func:`tokenize` gave when it was added, so callers need not tokenise the text again."""
        if len(self._ids) == 0:
            return None
        pos = int(np.searchsorted(self._ids, id, sorter=self._order))
        if pos >= len(self._ids):
            return None
        row = int(self._order[pos])
        return self._store.get(row) if self._ids[row] == id and self._alive[row] else None

    def search(self, query: Union[str, Sequence[str]], k: int = 10, allowed: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Top ``k`` rows by BM25: ``(ids int64, scores float32)``, best first; rows scoring 0 are left out.

        ``allowed``: optional boolean mask over external ids (``allowed[id]``) restricting the search.
        """
        return self.top(self.scores(query), k, allowed)

    def top(self, scores: np.ndarray, k: int = 10, allowed: Optional[np.ndarray] = None
            ) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`search` over a score vector :meth:`scores` returned (to reuse one scoring pass)."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        s = np.asarray(scores, dtype=np.float32)
        n = len(self._ids)
        if s.shape != (n,):
            raise ValueError(f"scores must hold one value per row ({n}), got shape {s.shape}")
        positive = s > 0
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            if self._identity and len(allowed) >= n:  # row i is id i: the mask applies as it is
                positive &= allowed[:n]
            else:
                ok = np.zeros(n, dtype=bool)
                inside = self._ids < len(allowed)
                ok[inside] = allowed[self._ids[inside]]
                positive &= ok
        pos = np.flatnonzero(positive)
        if len(pos) > k:
            pos = pos[np.argpartition(-s[pos], k - 1)[:k]]
        pos = pos[np.argsort(-s[pos], kind="stable")]
        return self._ids[pos].copy(), s[pos].copy()

    # ------------------------------------------------------------- persistence
    def save(self, directory: os.PathLike) -> None:
        """Write the index into ``directory`` (created): settings, the fitted BM25 matrix, the token lists and the
        row ids (module docstring). Deleted rows are dropped for good (the matrix is re-fitted without them)."""
        if self._stale or not self._alive.all():
            self._compact()
            self._fit()
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        np.save(d / "ids.npy", np.asarray(self._ids, dtype=np.int64))
        np.save(d / "tokens.npy", np.asarray(self._store.flat, dtype=np.int32))
        np.save(d / "token_offsets.npy", np.asarray(self._store.offsets, dtype=np.int64))
        (d / "vocab.json").write_text(json.dumps(self._store.vocab, ensure_ascii=False), encoding="utf-8")
        if self._matrix is not None:
            self._matrix.save(d / "matrix")
        payload = {"format": "medretrieve-lexical-2", "stem": self.stem, "remove_stopwords": self.remove_stopwords,
                   "k1": self.k1, "b": self.b, "tokenizer": self.tokenizer_version, "rows": int(len(self._ids))}
        (d / self.FILE).write_text(json.dumps(payload), encoding="utf-8")

    @classmethod
    def load(cls, directory: os.PathLike, mmap: bool = True) -> "LexicalIndex":
        """Load an index written by :meth:`save` (arrays memory-mapped with ``mmap``), or one in the first format.
        FileNotFoundError when there is none; DamagedCollection (a ValueError) naming the file whose settings,
        array shapes or structure are wrong."""
        path = Path(directory) / cls.FILE
        if not path.is_file():
            raise FileNotFoundError(f"no lexical index at {path}")
        payload = parse_model(LexicalSettings, path.read_bytes(), path, "not a medretrieve lexical index (format {!r})")
        idx = cls(payload.stem, payload.remove_stopwords, payload.k1, payload.b)
        idx.tokenizer_version = payload.tokenizer
        if payload.format == "medretrieve-lexical-1":
            return idx._load_first_format(path, read_json(path))
        if payload.rows is None:
            raise DamagedCollection(f"{path}: rows: Field required")
        idx._load_arrays(Path(directory), payload.rows, mmap)
        return idx

    def _load_arrays(self, d: Path, rows: int, mmap: bool) -> None:
        """The arrays :meth:`save` wrote, checked for dtype, shape and order (ids strictly rising, token offsets
        rising from 0 to the number of tokens, token ids inside the vocabulary)."""
        self._ids = load_array(d / "ids.npy", np.int64, rows, mmap=mmap)
        offsets = load_array(d / "token_offsets.npy", np.int64, rows + 1, mmap=mmap)
        flat = load_array(d / "tokens.npy", np.int32, int(offsets[-1]), mmap=mmap)
        vocab = read_json(d / "vocab.json")
        if (not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab) or int(offsets[0]) != 0
                or bool(np.any(np.diff(offsets) < 0)) or (rows and (int(self._ids[0]) < 0
                                                                     or bool(np.any(np.diff(self._ids) <= 0))))
                or (len(flat) and (int(flat.max()) >= len(vocab) or int(flat.min()) < 0))):
            raise DamagedCollection(f"{d}: the ids, token offsets, token ids or vocabulary of {rows} rows are out of "
                                    "order or out of range; the lexical index is damaged")
        self._store = TokenStore(vocab, flat, offsets)
        self._alive = np.ones(rows, dtype=bool)
        if rows:
            self._matrix = BM25Matrix.load(d / "matrix", mmap)
            if self._matrix.num_docs != rows:
                raise DamagedCollection(f"{d / 'matrix'} scores {self._matrix.num_docs} rows, not {rows}; the "
                                        "lexical index is damaged")
        self._order = np.argsort(self._ids, kind="stable")
        self._identity = _is_identity(self._ids)

    def _load_first_format(self, path: Path, payload: dict) -> "LexicalIndex":
        try:
            ids = np.asarray(payload["ids"], dtype=np.int64)
            tokens = payload["tokens"]
            ok = (ids.ndim == 1 and isinstance(tokens, list) and len(ids) == len(tokens)
                  and len(np.unique(ids)) == len(ids)
                  and all(isinstance(ts, list) and all(isinstance(t, str) for t in ts) for ts in tokens))
        except (KeyError, TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise DamagedCollection(f"{path}: the ids and token lists are missing, malformed, of two lengths or "
                                    "repeat an id; the lexical index is damaged")
        self._ids = ids
        self._store.extend(tokens)
        self._alive = np.ones(len(ids), dtype=bool)
        self._fit()
        return self
