"""Citation checks: does each ``[n]`` in an answer name a provided source, and
does that source support the sentence?

Support is lexical overlap of content words (stemmed, stopwords removed, with
:func:`medretrieve.corpus.lexical.tokenize`) between the sentence and its cited
sources, above :data:`SUPPORT_THRESHOLD`; optionally a semantic score from an
encoder. Unsupported sentences are flagged, not removed.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from ..records import INSUFFICIENT, Citation
from .parsers import CITE_RE as _CITE_RE
from .parsers import _ITEM_PREFIX, _clean
from .prompts import evidence_text

__all__ = ["Citation", "verify_citations", "split_sentences", "SUPPORT_THRESHOLD", "SEMANTIC_THRESHOLD"]

#: Fraction of a sentence's content words (stemmed, stopwords removed) that
#: must appear in the cited source(s) for the sentence to count as supported.
#: 0.5 accepts paraphrases that keep the key terms (drug, disease, effect)
#: and rejects sentences that bring in a new claim not in the source.
SUPPORT_THRESHOLD = 0.5
#: Cosine similarity (sentence vs best cited source) that counts as support
#: when an encoder is given; either test passing is enough.
SEMANTIC_THRESHOLD = 0.6

# Words that describe the sources rather than make a claim ("[1] and [2] both report ...").
_META_WORDS = (
    "source sources document documents study studies report reports reported reporting show shows showed "
    "shown find finds found suggest suggests suggested indicate indicates indicated state states stated "
    "according agree agrees contradict contradicts contradiction describe describes described note notes "
    "noted mention mentions mentioned add adds addition additionally however whereas while both similarly "
    "likewise consistent evidence information provide provides provided support supports supported"
)

_ABBREV_RE = re.compile(r"(?:\b(?:e\.g|i\.e|et al|vs|approx|fig|figs|dr|no|ca|cf|resp|incl)\.|\b[A-Z]\.)$", re.IGNORECASE)


def _cited_numbers(sentence: str) -> list[int]:
    nums: list[int] = []
    for group in _CITE_RE.findall(sentence):
        for part in re.split(r"\s*(?:,|;|and)\s*", group):
            m = re.match(r"(\d+)\s*[-–]\s*(\d+)$", part.strip())
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if lo <= hi and hi - lo < 50:
                    nums.extend(range(lo, hi + 1))
                else:
                    nums.extend([lo, hi])
            elif part.strip().isdigit():
                nums.append(int(part.strip()))
    return sorted(set(nums))


_LEADING_CITES_RE = re.compile(r"^((?:\[[^\]]*\][\s.,;]*)+)(?=[A-Z])")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer. Citations written after the full stop go with the
    sentence before: a citation-only fragment ("[2].") and markers followed by a
    capitalised word ("... in 2018. [1] Both ...") join the previous sentence,
    while "[1] and [2] report ..." (a lower-case word follows) starts a new one."""
    pieces: list[str] = []
    for line in text.splitlines():
        line = _ITEM_PREFIX.sub("", line).strip()
        if not line:
            continue
        parts = re.split(r"(?<=[.!?])\s+(?=[\[(\"'A-Z0-9])", line)
        merged: list[str] = []
        for p in parts:
            if merged and _ABBREV_RE.search(merged[-1]):
                merged[-1] += " " + p
            else:
                merged.append(p)
        for p in merged:
            if pieces and not _CITE_RE.sub("", p).strip(" .;,!?"):
                pieces[-1] += " " + p
                continue
            lead = _LEADING_CITES_RE.match(p) if pieces else None
            if lead:
                pieces[-1] += " " + lead.group(1).strip()
                p = p[lead.end():]
            pieces.append(p)
    return pieces


def _content_terms(text: str) -> set:
    from ..corpus.lexical import tokenize

    meta = _meta_terms()
    return {t for t in tokenize(_CITE_RE.sub(" ", text)) if t not in meta}


_META_CACHE: list = []


def _meta_terms() -> frozenset:
    if not _META_CACHE:
        from ..corpus.lexical import tokenize

        _META_CACHE.append(frozenset(tokenize(_META_WORDS, remove_stopwords=False)))
    return _META_CACHE[0]


def _encode(encoder: Any, texts: list[str]) -> Any:
    import numpy as np

    vecs = encoder.encode(texts) if hasattr(encoder, "encode") else encoder(texts)
    vecs = np.asarray(vecs, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {vecs.shape} for {len(texts)} texts; expected [n, dim]")
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)


def verify_citations(
    answer_text: str,
    sources: Sequence[Any],
    *,
    threshold: float = SUPPORT_THRESHOLD,
    encoder: Any = None,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
    require_citations: bool = True,
) -> list[Citation]:
    """Check every sentence of ``answer_text`` against the numbered ``sources``.

    ``sources`` are numbered from 1 as in the prompt (str, dict with ``text``
    and optional ``title``, or Hit). A sentence is supported when every ``[n]``
    names a provided source and either (a) at least ``threshold`` of its
    content words (stemmed, stopwords and source-describing words removed)
    occur in the union of the cited sources, or (b) an ``encoder`` (``.encode(list[str])
    -> [n, dim]`` or a callable) is given and the cosine similarity to the
    best cited source is at least ``semantic_threshold`` (computed only for
    sentences that fail (a), so ``support_score`` is the lexical score for the
    others). Sentences without a
    citation are returned unsupported ("no citation") when ``require_citations``,
    except ones that say "insufficient information"; otherwise they are skipped.
    """
    if not isinstance(answer_text, str):
        raise TypeError(f"answer_text must be a str, got {type(answer_text).__name__}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    texts = []
    for i, s in enumerate(sources, 1):
        title, text = evidence_text(s, f"source {i}")
        texts.append(f"{title}\n{text}" if title else text)
    source_terms = [_content_terms(t) for t in texts]
    sentences = split_sentences(_clean(answer_text))
    results: list[Citation] = []
    pending_semantic: list[tuple[int, list[int]]] = []
    for sentence in sentences:
        cited = _cited_numbers(sentence)
        if not cited:
            if require_citations and INSUFFICIENT not in sentence.lower():
                results.append(Citation(sentence, [], False, 0.0, "no citation"))
            continue
        invalid = [n for n in cited if not 1 <= n <= len(texts)]
        if invalid:
            results.append(Citation(
                sentence, cited, False, 0.0,
                f"cites {', '.join(f'[{n}]' for n in invalid)} but only {len(texts)} sources were provided",
                invalid,
            ))
            continue
        terms = _content_terms(sentence)
        if not terms:
            results.append(Citation(sentence, cited, True, 1.0, "no content words to check"))
            continue
        union = set().union(*(source_terms[n - 1] for n in cited))
        found = terms & union
        score = len(found) / len(terms)
        cites = "".join(f"[{n}]" for n in cited)
        ok = score >= threshold
        reason = (f"{len(found)}/{len(terms)} content words found in {cites} "
                  f"({score:.2f} {'>=' if ok else '<'} {threshold:.2f})")
        if not ok:
            missing = sorted(terms - union)[:8]
            reason += f"; not in the source: {', '.join(missing)}"
        results.append(Citation(sentence, cited, ok, score, reason))
        if encoder is not None and not ok:
            pending_semantic.append((len(results) - 1, cited))
    if encoder is not None and pending_semantic:
        # Only sentences that failed the lexical test, and only the sources they cite,
        # are encoded: the encoder costs ~1000x the lexical check (bench/RESULTS.md).
        needed = sorted({n for _, cited in pending_semantic for n in cited})
        row_of = {n: r for r, n in enumerate(needed)}
        sent_vecs = _encode(encoder, [_CITE_RE.sub(" ", results[i].sentence) for i, _ in pending_semantic])
        src_vecs = _encode(encoder, [texts[n - 1] for n in needed])
        for row, (i, cited) in enumerate(pending_semantic):
            sim = max(float(sent_vecs[row] @ src_vecs[row_of[n]]) for n in cited)
            c = results[i]
            c.reason += f"; cosine {sim:.2f} ({'>=' if sim >= semantic_threshold else '<'} {semantic_threshold:.2f})"
            c.support_score = max(c.support_score, sim)
            c.supported = c.supported or sim >= semantic_threshold
    return results
