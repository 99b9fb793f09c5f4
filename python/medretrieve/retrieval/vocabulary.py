"""Static term knowledge shipped in ``medretrieve/assets``: abbreviations, relations, a general-English vocabulary.

- :func:`abbreviations`: ``assets/abbreviations.tsv``, abbreviation (case-sensitive) -> expansions.
- :func:`relations`: ``assets/relations.tsv``, relation kind -> term -> related terms (disease -> first-line
  treatments, gene -> pathway).
- :func:`wordpiece_count`: how many pieces BERT's uncased WordPiece vocabulary (the tokenizer shipped for
  all-MiniLM-L6-v2) needs for a word; 1 means a general-English word. Subject words (``retrieval.query``) are
  the question's words this vocabulary does not know.

Each table loads once per process (``lru_cache``).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, List

from .._assets import ASSETS


@lru_cache(maxsize=1)
def abbreviations() -> Dict[str, List[str]]:
    """Built-in abbreviation list: abbreviation (case-sensitive) -> expansions."""
    out: Dict[str, List[str]] = {}
    for line in (ASSETS / "abbreviations.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        abbr, exp = line.split("\t")
        out[abbr] = exp.split("|")
    return out


@lru_cache(maxsize=1)
def relations() -> Dict[str, Dict[str, List[str]]]:
    """Relation tables: relation kind -> lower-case term -> related terms."""
    out: Dict[str, Dict[str, List[str]]] = {}
    for line in (ASSETS / "relations.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, term, rel = line.split("\t")
        out.setdefault(kind, {})[term.lower()] = rel.split("|")
    return out


@lru_cache(maxsize=1)
def _general_vocabulary() -> Any:
    """BERT's uncased WordPiece vocabulary (the tokenizer shipped for all-MiniLM-L6-v2), no padding."""
    import gzip

    from tokenizers import Tokenizer

    with gzip.open(ASSETS / "all-MiniLM-L6-v2.tokenizer.json.gz", "rt", encoding="utf-8") as fh:
        tok = Tokenizer.from_str(fh.read())
    tok.no_padding()
    tok.no_truncation()
    return tok


_INFLECTIONS = ("s", "es", "ed", "d", "ing", "ly")


@lru_cache(maxsize=65536)
def wordpiece_count(word: str) -> int:
    """Number of WordPiece pieces ``word`` takes in BERT's general-English vocabulary (1 = a known word);
    the fewest over the word and the word less a common inflection ("blockers" counts as "blocker")."""
    vocab = _general_vocabulary()
    forms = [word] + [word[: -len(x)] for x in _INFLECTIONS if word.endswith(x) and len(word) - len(x) >= 3]
    return min(len(vocab.encode(f, add_special_tokens=False).ids) for f in forms)
