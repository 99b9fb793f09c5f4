"""BM25 lexical search (bm25s) with biomedical-aware tokenisation.

Why bm25s: it is pure Python + numpy/scipy (no extra native wheel) and scores a
query over a whole collection with one sparse matrix product, fast enough for the
first stage of a search under a deadline.

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
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

# bumped whenever tokenize() changes what it emits (stored token lists must then be rebuilt)
TOKENIZER_VERSION = 2

_TOKEN_RE = re.compile(r"[^\W_]+(?:(?:[-/]|(?<=\d)\.(?=\d))[^\W_]+)*")

_EXTRA_STOPWORDS = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "does", "do", "did", "is", "are",
    "was", "were", "can", "could", "should", "would", "may", "might", "list", "describe", "name", "there",
    "been", "being", "has", "have", "had", "also", "their", "its", "these", "those", "than", "then", "via",
}


@lru_cache(maxsize=1)
def stopwords() -> frozenset:
    """English stopwords (bm25s's list plus question words)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN) | frozenset(_EXTRA_STOPWORDS)


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


class LexicalIndex:
    """BM25 over a set of rows (integer ids, e.g. chunk row numbers)."""

    FILE = "lexical.json"

    def __init__(self, stem: bool = True, remove_stopwords: bool = True, k1: float = 1.5, b: float = 0.75) -> None:
        self.stem = stem
        self.remove_stopwords = remove_stopwords
        self.k1 = float(k1)
        self.b = float(b)
        self._ids = np.zeros(0, dtype=np.int64)  # row -> external id
        self._tokens: List[List[str]] = []
        self._alive = np.zeros(0, dtype=bool)
        self._bm25: Any = None  # bm25s.BM25 once fitted
        self._vocab: dict = {}
        self._df: Optional[Counter] = None
        self._order = np.zeros(0, dtype=np.int64)
        self.tokenizer_version = TOKENIZER_VERSION  # of the stored token lists (older ones come from load)

    # ------------------------------------------------------------- building
    def __len__(self) -> int:
        return int(self._alive.sum())

    def add(self, texts: Sequence[str], ids: Iterable[int]) -> None:
        """Add rows (re-fits BM25 over every live row; deleted rows are dropped)."""
        ids_arr = np.asarray(list(ids), dtype=np.int64)
        if len(ids_arr) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(ids_arr)} ids")
        live_ids = set(self._ids[self._alive].tolist())
        dup = live_ids.intersection(ids_arr.tolist())
        if dup or len(set(ids_arr.tolist())) != len(ids_arr):
            raise ValueError(f"ids already present or repeated: {sorted(dup)[:5] or 'repeated in the batch'}")
        new_tokens = [tokenize(t, self.stem, self.remove_stopwords) for t in texts]
        keep = np.flatnonzero(self._alive)
        self._tokens = [self._tokens[i] for i in keep] + new_tokens
        self._ids = np.concatenate([self._ids[keep], ids_arr])
        self._alive = np.ones(len(self._ids), dtype=bool)
        self._fit()

    def _fit(self) -> None:
        import bm25s

        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b)
        if self._tokens:
            self._bm25.index(self._tokens, show_progress=False)
        self._vocab = self._bm25.vocab_dict if self._tokens else {}
        self._df = None
        self._order = np.argsort(self._ids, kind="stable")  # for id -> row lookups

    def delete(self, ids: Iterable[int]) -> int:
        """Hide rows from search; returns how many were live."""
        mask = np.isin(self._ids, np.asarray(list(ids), dtype=np.int64)) & self._alive
        self._alive[mask] = False
        if mask.any():
            self._df = None  # document frequencies are over live rows
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
        n = len(self._ids)
        toks = [t for t in query_tokens + list(extra_tokens) if t in self._vocab]
        if not toks or n == 0:
            return np.zeros(n, dtype=np.float32)
        s = np.asarray(self._bm25.get_scores(toks), dtype=np.float32)
        s[~self._alive] = 0.0
        return s

    def idf(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 idf, ``log(1 + (n - df + 0.5) / (df + 0.5))``, of each (already tokenised) token over
        the live rows; an unseen token gets the idf of df = 0."""
        if self._df is None:
            df: Counter = Counter()
            for i in np.flatnonzero(self._alive):
                df.update(set(self._tokens[i]))
            self._df = df
        n = len(self)
        d = np.array([self._df.get(t, 0) for t in tokens], dtype=np.float64)
        return np.log1p((n - d + 0.5) / (d + 0.5))

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

    def tokens_of(self, id: int) -> Optional[List[str]]:
        """The stored tokens of the live row with external ``id`` (None when unknown or deleted): what
        :func:`tokenize` gave when it was added, so callers need not tokenise the text again."""
        if len(self._ids) == 0:
            return None
        pos = int(np.searchsorted(self._ids, id, sorter=self._order))
        if pos >= len(self._ids):
            return None
        row = int(self._order[pos])
        return self._tokens[row] if self._ids[row] == id and self._alive[row] else None

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
        if s.shape != (len(self._ids),):
            raise ValueError(f"scores must hold one value per row ({len(self._ids)}), got shape {s.shape}")
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            ok = np.zeros(len(self._ids), dtype=bool)
            inside = self._ids < len(allowed)
            ok[inside] = allowed[self._ids[inside]]
            s = np.where(ok, s, 0.0).astype(np.float32)
        pos = np.flatnonzero(s > 0)
        if len(pos) > k:
            pos = pos[np.argpartition(-s[pos], k - 1)[:k]]
        pos = pos[np.argsort(-s[pos], kind="stable")]
        return self._ids[pos].copy(), s[pos].copy()

    # ------------------------------------------------------------- persistence
    def save(self, directory: os.PathLike) -> None:
        """Write the index into ``directory`` (created; one JSON file: settings, ids, tokens)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        keep = np.flatnonzero(self._alive)
        payload = {
            "format": "medretrieve-lexical-1",
            "stem": self.stem,
            "remove_stopwords": self.remove_stopwords,
            "k1": self.k1,
            "b": self.b,
            "tokenizer": self.tokenizer_version,
            "ids": self._ids[keep].tolist(),
            "tokens": [self._tokens[i] for i in keep],
        }
        tmp = d / (self.FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, separators=(",", ":"))
        os.replace(tmp, d / self.FILE)

    @classmethod
    def load(cls, directory: os.PathLike) -> "LexicalIndex":
        path = Path(directory) / cls.FILE
        if not path.is_file():
            raise FileNotFoundError(f"no lexical index at {path}")
        with open(path, "r", encoding="utf-8") as fh:
            payload = json.load(fh)
        if payload.get("format") != "medretrieve-lexical-1":
            raise ValueError(f"{path} is not a medretrieve lexical index (format {payload.get('format')!r})")
        idx = cls(payload["stem"], payload["remove_stopwords"], payload["k1"], payload["b"])
        idx._ids = np.asarray(payload["ids"], dtype=np.int64)
        # one str object per distinct token: JSON gives every occurrence its own (at 100k chunks 6.2M strings,
        # ~340 MB more in each process that opens the collection, e.g. each server worker)
        canonical: dict = {}
        idx._tokens = [[canonical.setdefault(t, t) for t in toks] for toks in payload.pop("tokens")]
        idx.tokenizer_version = int(payload.get("tokenizer", 1))
        idx._alive = np.ones(len(idx._ids), dtype=bool)
        idx._fit()
        return idx
