"""Grounded answers end to end: retrieve, abstain when evidence is weak, prompt, generate (or extract), parse and
check citations; plus the BioASQ submission writer.

- :class:`AbstentionPolicy` + :class:`Answerer`: LLM failures are reported on the :class:`Answer` (``error``),
  not raised.
- :func:`write_bioasq_submission` writes BioASQ submission JSON.
- The output parsers live in :mod:`medretrieve.generation.parsers`, the citation checks in
  :mod:`medretrieve.generation.citations`, extractive answers in :mod:`medretrieve.generation.extractive`.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Union

from ..records import Answer, Citation
from ..outbound import Deadline
from ..wire import check_search_options
from .extractive import extractive_answer
from .citations import SUPPORT_THRESHOLD, verify_citations
from .parsers import (
    INSUFFICIENT,
    clean_output,
    is_insufficient,
    parse_bioasq,
    split_exact,
)
from .prompts import BIOASQ_TYPES, bioasq_messages, cite_messages
from .schemas import bioasq_response_format

__all__ = ["write_bioasq_submission", "AbstentionPolicy", "Answer", "Answerer", "Citation", "MODES", "SOURCE_FLOOR",
           "field_of", "shown_sources"]

# ---------------------------------------------------------------------------
# BioASQ submission

def field_of(item: Any, key: str, default: Any = None) -> Any:
    """``item[key]`` for a mapping, ``item.key`` for an object (hits and questions come as either)."""
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _entities(value: Any, limit: int, qid: str) -> list[list[str]]:
    """``[[name, synonym...], ...]`` from a str, ``[str]`` or ``[[str]]``."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"question {qid}: exact_answer must be a list of entities, got {type(value).__name__}")
    out = []
    for v in value:
        names = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
        if names is None or not all(isinstance(n, str) for n in names):
            raise ValueError(f"question {qid}: each entity must be a str or a list of synonym strs, got {v!r}")
        names = [n.strip() for n in names if n.strip()]
        if names:
            out.append(names)
    return out[:limit]


#: BioASQ submission phases: A (documents + snippets), B (answers from gold snippets), A+ (both, retrieved).
PHASES = ("A", "B", "A+")
_SNIPPET_INTS = ("offsetInBeginSection", "offsetInEndSection")
_SNIPPET_STRS = ("document", "text", "beginSection", "endSection")


def _snippet(value: Any, qid: str) -> dict:
    """One submitted snippet, checked: document URL, text, sections and the [begin, end) character span."""
    if not isinstance(value, Mapping):
        raise ValueError(f"question {qid}: a snippet must be an object, got {type(value).__name__}")
    out: dict = {}
    for key in _SNIPPET_STRS:
        v = value.get(key)
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"question {qid}: snippet {key!r} must be a non-empty string, got {v!r}")
        out[key] = v
    for key in _SNIPPET_INTS:
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"question {qid}: snippet {key!r} must be an integer >= 0, got {v!r}")
        out[key] = v
    if out["beginSection"] == out["endSection"] and out["offsetInEndSection"] < out["offsetInBeginSection"]:
        raise ValueError(f"question {qid}: snippet ends ({out['offsetInEndSection']}) before it begins "
                         f"({out['offsetInBeginSection']})")
    return out


def _evidence(item: Any, qid: str) -> dict:
    entry: dict = {}
    docs = field_of(item, "documents") or []
    if isinstance(docs, str) or not all(isinstance(d, str) and d for d in docs):
        raise ValueError(f"question {qid}: documents must be a list of URL strings")
    entry["documents"] = list(docs)[:10]
    entry["snippets"] = [_snippet(sn, qid) for sn in list(field_of(item, "snippets") or [])[:10]]
    return entry


def _submission_entry(item: Any, phase: str = "A+") -> dict:
    qid = field_of(item, "id")
    if not isinstance(qid, str) or not qid:
        raise ValueError(f"every answer needs a non-empty str 'id', got {qid!r}")
    if phase == "A":
        return {"id": qid, **_evidence(item, qid)}
    qtype = field_of(item, "type") or field_of(item, "qtype")
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"question {qid}: type must be one of {BIOASQ_TYPES}, got {qtype!r}")
    ideal = field_of(item, "ideal_answer") or ""
    if isinstance(ideal, (list, tuple)):
        ideal = " ".join(str(x) for x in ideal)
    entry: dict = {"id": qid, "ideal_answer": str(ideal)}
    exact = field_of(item, "exact_answer")
    if qtype == "yesno" and exact is None:
        pass  # no answer (abstained or failed): the entry goes without exact_answer, scored as wrong
    elif qtype == "yesno":
        if isinstance(exact, bool):
            exact = "yes" if exact else "no"
        if isinstance(exact, (list, tuple)) and len(exact) == 1:
            exact = exact[0]
        if not isinstance(exact, str) or exact.strip().lower() not in ("yes", "no"):
            raise ValueError(f"question {qid}: a yesno exact_answer must be 'yes' or 'no', got {exact!r}")
        entry["exact_answer"] = exact.strip().lower()
    elif qtype == "factoid":
        entry["exact_answer"] = _entities(exact, 5, qid)
    elif qtype == "list":
        entry["exact_answer"] = _entities(exact, 100, qid)
    if phase == "A+":
        entry.update({k: v for k, v in _evidence(item, qid).items() if v})
    return entry


def write_bioasq_submission(
    answers: Iterable[Any],
    path: Union[str, os.PathLike],
    *,
    system: Optional[str] = None,
    username: Optional[str] = None,
    password: Optional[str] = None,
    phase: str = "A+",
) -> dict:
    """Write BioASQ submission JSON (``{"questions": [...]}``) atomically; returns it.

    ``phase`` (:data:`PHASES`): ``"A"`` entries hold ``id``, ``documents`` (PubMed URLs, at most 10) and
    ``snippets`` (at most 10, each with ``document``, ``text``, ``offsetInBeginSection``,
    ``offsetInEndSection``, ``beginSection``, ``endSection``: the text's character span, end exclusive, in its
    section); ``"B"`` entries hold the answers; ``"A+"`` both (evidence optional).
    An answer (dict or object) has ``id``, ``type`` (or ``qtype``),
    ``exact_answer``, ``ideal_answer`` and optionally ``documents``/``snippets``.
    Shapes: yesno ``"yes"``/``"no"``; factoid ``[[c1], [c2], ...]`` (at most 5,
    inner lists may hold synonyms); list ``[[e1], [e2], ...]`` (at most 100);
    summary has no ``exact_answer``, nor has a yesno answer whose exact answer is
    None (abstained / failed); ``ideal_answer`` is one string.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    entries = [_submission_entry(a, phase) for a in answers]
    seen: set = set()
    for e in entries:
        if e["id"] in seen:
            raise ValueError(f"question {e['id']} appears twice in the submission")
        seen.add(e["id"])
    doc: dict = {}
    for key, value in (("username", username), ("password", password), ("system", system)):
        if value is not None:
            doc[key] = value
    doc["questions"] = entries
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".submission-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=2)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return doc


# ---------------------------------------------------------------------------
# Abstention and the end-to-end answerer

@dataclass
class AbstentionPolicy:
    """When to answer "insufficient information" without calling the LLM.

    - ``weak``: abstain when the retriever flags the question as weak
      (``SearchResult.weak``, which does not depend on timing) for one of the
      reasons ``abstain_on`` names (by default every reason the retriever gives: no hits,
      the best evidence does not match the question's words, or it does not mention the
      question's subject; the check reads the best evidence only, bench/RESULTS.md
      "Weak questions") -- unless
      ``trust_recovery`` and the retriever says its recovery changed the result
      (``recovered``). Off by default: recovery is skipped when the deadline is
      near, so trusting it would make the same question answer or abstain
      depending on machine load;
    - ``min_top_score``: abstain when the best hit scores below it (the hit's
      ``score``, or ``scores[score_key]`` when ``score_key`` names a stage
      such as ``"rerank"`` or ``"dense"``);
    - ``min_hits``: abstain when fewer hits came back.
    """

    weak: bool = True
    min_top_score: Optional[float] = None
    min_hits: int = 1
    score_key: Optional[str] = None
    trust_recovery: bool = False
    abstain_on: tuple = ("no hits", "no matching evidence", "subject not found")  # weak reasons (first words)

    def check(self, result: Any) -> Optional[str]:
        """The reason to abstain, or None to go on and answer."""
        hits = list(field_of(result, "hits") or [])
        if len(hits) < self.min_hits:
            return f"only {len(hits)} evidence passages were retrieved (need {self.min_hits})"
        if self.weak and field_of(result, "weak", False):
            reasons = [str(r) for r in field_of(result, "weak_reasons") or []]
            decisive = [r for r in reasons if r.startswith(tuple(self.abstain_on))]
            if decisive and not (self.trust_recovery and field_of(result, "recovered", False)):
                return f"the retriever flagged the question as weak ({'; '.join(decisive)})"
        if self.min_top_score is not None and hits:
            scores = []
            for h in hits:
                if self.score_key is None:
                    scores.append(float(field_of(h, "score", float("-inf"))))
                else:
                    stage = (field_of(h, "scores") or {}).get(self.score_key)
                    if stage is not None:
                        scores.append(float(stage))
            if not scores:
                return f"no evidence has a {self.score_key!r} score to check against {self.min_top_score}"
            best = max(scores)
            if best < self.min_top_score:
                what = "score" if self.score_key is None else f"{self.score_key} score"
                return f"the best evidence {what} {best:.3f} is below the threshold {self.min_top_score}"
        return None


MODES = ("cite", "answer_only", "bioasq")

#: Score (on the evidence list's scale: the shipped ranker's probability of relevance, or the RRF score normalised
#: by the best without a ranker) an uncited source needs to be shown with an answer. Cited sources are always shown.
#: Why this high: the ranker gives a passage on the question's neighbouring topic ~0.8 (Hypertension for a diabetes
#: question), which a reader takes for a reference; the full evidence stays in ``Answer.evidence``.
SOURCE_FLOOR = 0.9


def shown_sources(evidence: list, citations: Iterable[Citation], floor: float = SOURCE_FLOOR) -> list[int]:
    """The 1-based numbers of the sources worth showing: every validly cited one, and the uncited ones whose
    ``score`` reaches ``floor`` (a hit placed by a stage other than the ranking, ``placed_by``, only when cited)."""
    cited = {n for c in citations for n in c.sources if n not in c.invalid_sources}
    out = []
    for n, h in enumerate(evidence, 1):
        score = field_of(h, "score")
        strong = isinstance(score, (int, float)) and score >= floor and not field_of(h, "placed_by")
        if n in cited or strong:
            out.append(n)
    return out


class Answerer:
    """Retrieve evidence, abstain when it is too weak, else ask the LLM and check the answer.

    ``retriever`` needs ``search(question, k=..., deadline_ms=...) -> SearchResult``
    (hits, query_type, weak, weak_reasons, recovered); ``backend`` is an LLM
    backend (:class:`medretrieve.generation.llm.Backend`), or None for an
    extractive answer: the evidence's own sentences that answer the question, each
    cited and checked (:mod:`.extractive`; ``mode`` must then be ``"cite"``). ``mode``: ``"cite"``
    (numbered sources, [n] citations, verified), ``"answer_only"`` (bare answer,
    for comparison) or ``"bioasq"`` (BioASQ Phase A+ exact + ideal answer).
    ``retrieve_deadline_ms`` is the retrieval budget (ms; None: none), capped by what is
    left of the call's ``deadline_ms``; ``max_source_chars`` trims each source
    in the prompt (chars) so small context windows fit; when the prompt still
    overflows the model's context (:class:`~medretrieve.generation.llm.LLMContextTooLong`)
    and ``shrink_on_overflow``, the top half of the sources is tried, down to one.
    ``source_floor``: the score an uncited source needs to be in ``Answer.shown_sources``
    (:data:`SOURCE_FLOOR`; cited sources always are).
    """

    def __init__(
        self,
        retriever: Any,
        backend: Any,
        mode: str = "cite",
        policy: Optional[AbstentionPolicy] = None,
        *,
        k: int = 10,
        max_tokens: int = 512,
        temperature: float = 0.0,
        retrieve_deadline_ms: Optional[float] = 300.0,
        max_source_chars: Optional[int] = 1500,
        encoder: Any = None,
        support_threshold: float = SUPPORT_THRESHOLD,
        search_kwargs: Optional[dict] = None,
        shrink_on_overflow: bool = True,
        source_floor: float = SOURCE_FLOOR,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not hasattr(retriever, "search"):
            raise TypeError("retriever must have a search(question, k=..., deadline_ms=...) method")
        if backend is not None and not hasattr(backend, "generate"):
            raise TypeError("backend must have a generate(messages, ...) method (or be None for extractive answers)")
        if backend is None and mode != "cite":
            raise ValueError(f"an extractive answer (backend=None) is always mode 'cite', not {mode!r}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self.retriever = retriever
        self.backend = backend
        self.mode = mode
        self.policy = policy if policy is not None else AbstentionPolicy()
        self.k = k
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.retrieve_deadline_ms = retrieve_deadline_ms
        self.max_source_chars = max_source_chars
        self.encoder = encoder
        self.support_threshold = support_threshold
        self.search_kwargs = dict(search_kwargs or {})
        self.shrink_on_overflow = shrink_on_overflow
        if isinstance(source_floor, bool) or not isinstance(source_floor, (int, float)) \
                or not math.isfinite(source_floor):
            raise ValueError(f"source_floor must be a finite number (a score), got {source_floor!r}")
        self.source_floor = float(source_floor)

    def _messages(self, question: str, qtype: Optional[str], hits: list) -> list[dict]:
        if self.mode == "bioasq":
            return bioasq_messages(question, qtype or "summary", hits, phase="A+", max_chars=self.max_source_chars)
        return cite_messages(question, hits, mode=self.mode, qtype=qtype, max_chars=self.max_source_chars)

    def _response_format(self, qtype: Optional[str]) -> dict:
        """Mode ``bioasq``: the reply's JSON schema (the prompt asks for that object); other modes: free text."""
        if self.mode != "bioasq":
            return {}
        return {"response_format": bioasq_response_format(qtype or "summary", self.max_tokens)}

    def answer(self, question: str, qtype: Optional[str] = None, deadline_ms: Optional[float] = None, *,
               where: Any = None, include_retracted: Optional[bool] = None, evidence_prior: Optional[bool] = None,
               recency_half_life: Optional[float] = None) -> Answer:
        """Answer ``question``; ``qtype`` (yesno | factoid | list | summary) asks for an
        exact answer too (default: the retriever's ``query_type`` when it is one of those).
        ``deadline_ms`` caps the whole call (retrieval + generation). The answer's ``shown_sources``
        are its cited sources and those scoring at least ``source_floor``.

        The evidence is searched as ``Retriever.search`` searches with the same options
        (:data:`medretrieve.wire.FILTER_OPTIONS`; None: the retriever's setting): ``where``, a metadata filter every
        evidence hit passes (text or JSON form, :mod:`medretrieve.filters`); ``include_retracted``, keep retracted
        articles; ``evidence_prior`` and ``recency_half_life`` (years), priors on the order. A bad option is refused
        before anything is retrieved, as a search refuses it: wire's ``SearchOptionTypeError`` (a TypeError) or
        ``SearchOptionValueError`` (a ValueError) naming it (a field the collection lacks: by the retriever)."""
        filters = check_search_options({"where": where, "include_retracted": include_retracted,
                                        "evidence_prior": evidence_prior, "recency_half_life": recency_half_life})
        ans = self._answer(question, qtype, deadline_ms, filters)
        offered = ans.evidence[:ans.sources_used or len(ans.evidence)]
        ans.shown_sources = shown_sources(offered, ans.citations, self.source_floor)
        return ans

    def _answer(self, question: str, qtype: Optional[str], deadline_ms: Optional[float],
                filters: Mapping[str, Any]) -> Answer:
        from .llm import LLMContextTooLong, LLMError, LLMTimeout

        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty str")
        if qtype is not None and qtype not in BIOASQ_TYPES:
            raise ValueError(f"qtype must be one of {BIOASQ_TYPES} or None, got {qtype!r}")
        clock = Deadline(deadline_ms)
        kwargs = {**self.search_kwargs, **filters}
        budget = min(self.retrieve_deadline_ms if self.retrieve_deadline_ms is not None else math.inf,
                     clock.remaining_ms())
        if math.isfinite(budget):
            kwargs["deadline_ms"] = max(0.0, budget)
        with clock.stage("retrieve"):
            result = self.retriever.search(question, k=self.k, **kwargs)
        hits = list(field_of(result, "hits") or [])
        if qtype is None and field_of(result, "query_type") in BIOASQ_TYPES:
            qtype = field_of(result, "query_type")
        if self.mode == "bioasq" and qtype is None:
            qtype = "summary"
        ans = Answer(question=question, text="", qtype=qtype, mode=self.mode, evidence=hits)

        reason = self.policy.check(result)
        if reason is not None:
            ans.text, ans.abstained, ans.abstain_reason = INSUFFICIENT, True, reason
            ans.timings = clock.finish()
            return ans

        if self.backend is None:
            return self._extract(ans, question, hits, clock)
        used = hits
        with clock.stage("generate"):
            while True:
                ans.sources_used = len(used)
                try:
                    remaining = clock.remaining_ms()
                    if remaining <= 0:
                        raise LLMTimeout(f"the deadline ({deadline_ms} ms) was used up before generation")
                    raw = self.backend.generate(
                        self._messages(question, qtype, used), max_tokens=self.max_tokens,
                        temperature=self.temperature, deadline_ms=None if math.isinf(remaining) else remaining,
                        **self._response_format(qtype),
                    )
                    break
                except LLMContextTooLong as exc:
                    if not self.shrink_on_overflow or len(used) <= 1:
                        ans.error = f"{type(exc).__name__}: {exc}"
                        ans.timings = clock.finish()
                        return ans
                    # Keep the best-ranked half of the evidence and ask again.
                    ans.notes.append(f"the prompt with {len(used)} sources overflowed the model's context; "
                                     f"retried with the top {len(used) // 2}")
                    used = used[: len(used) // 2]
                except LLMError as exc:
                    ans.error = f"{type(exc).__name__}: {exc}"
                    ans.timings = clock.finish()
                    return ans
        ans.raw = raw
        with clock.stage("verify"):
            self._fill(ans, raw, qtype, used)
        ans.timings = clock.finish()
        return ans

    def _fill(self, ans: Answer, raw: str, qtype: Optional[str], hits: list) -> None:
        if self.mode == "bioasq":
            try:
                parsed = parse_bioasq(raw, qtype or "summary")
            except ValueError as exc:
                if is_insufficient(raw):
                    self._model_abstained(ans, raw)
                else:
                    ans.text, ans.error = clean_output(raw), f"unreadable BioASQ answer: {exc}"
                return
            ans.text, ans.exact_answer = parsed["ideal_answer"], parsed["exact_answer"]
            return
        body, exact_line = split_exact(clean_output(raw))
        if is_insufficient(body):
            self._model_abstained(ans, raw)
            return
        ans.text = body
        if qtype in ("yesno", "factoid", "list"):
            try:
                if exact_line is not None:
                    ans.exact_answer = parse_bioasq(exact_line, qtype)["exact_answer"]
                elif qtype == "yesno":
                    ans.exact_answer = parse_bioasq(body, "yesno")["exact_answer"]
            except ValueError:
                ans.exact_answer = None  # the free-text answer still stands
        if self.mode == "cite":
            ans.citations = verify_citations(body, hits, threshold=self.support_threshold, encoder=self.encoder)

    def _extract(self, ans: Answer, question: str, hits: list, clock: Deadline) -> Answer:
        """The answer from the evidence's own sentences (no LLM), cited and verified like a generated one."""
        with clock.stage("generate"):
            text = extractive_answer(question, hits)
        ans.sources_used = len(hits)
        if text is None:
            ans.text, ans.abstained = INSUFFICIENT, True
            ans.abstain_reason = "no evidence sentence holds enough of the question's terms"
        else:
            ans.text = ans.raw = text
            with clock.stage("verify"):
                ans.citations = verify_citations(text, hits, threshold=self.support_threshold, encoder=self.encoder)
        ans.notes.append("extractive answer: sentences of the evidence (no LLM configured)")
        ans.timings = clock.finish()
        return ans

    @staticmethod
    def _model_abstained(ans: Answer, raw: str) -> None:
        ans.text = clean_output(raw)
        ans.abstained = True
        ans.abstain_reason = "the model judged the retrieved evidence insufficient"
