"""MedRGB scenarios: standard RAG, sufficiency, integration and robustness over a retriever and an LLM.

How a question's context is built
---------------------------------
1. *Signal documents* come from the question's own retrieval: the LLM writes
   search topics (:func:`.prompts.search_topics_messages`), each topic is searched
   and its top ``per_topic`` (3) hits are kept, interleaved by rank and
   deduplicated; when that gives fewer than the largest ``n`` needed, a search
   with the question itself tops the list up.
2. *Noise documents* are other questions' signal documents, never one that
   shares a chunk or source-document id with the question's own signal
   documents (:func:`compose_context`).
3. Settings: ``standard`` uses the top ``n`` signal documents (n in 0, 5, 20; n=0 is the no-retrieval
   baseline: no documents, the model answers from its own knowledge);
   ``sufficiency`` and ``integration`` use ``round(n*p/100)`` signal documents
   plus noise, shuffled (same context for both at the same n, p);
   ``robustness`` uses the top ``n`` signal documents of which all but
   ``round(n*p/100)`` are replaced by LLM counterfactual versions
   (``prompts.counterfactual_messages``), so ``p`` is the share of factually
   correct documents (:func:`compose_robustness_context`); only the documents
   some setting swaps are rewritten (:func:`robustness_swaps`). Every random choice
   is seeded by ``(seed, question id, n, p)``.
4. Integration and robustness sub-questions and their gold answers are written
   by the LLM from the question's top signal documents
   (``prompts.sub_qa_messages``); predicted sub-answers are scored by exact match
   and by the LLM judge (``judge_backend``: a model other than the one under
   test; the model under test itself when none is given, as the run reports).
   Robustness also scores fact detection: the counterfactual documents the model
   flags, per setting.
5. The answer is asked for as JSON with the prompt's fields under a JSON schema
   (``schemas.medrgb_response_format``: the answer an enum of the option
   letters); a backend that decodes under a schema (llama.cpp, vLLM) then
   cannot stop before the answer, which is still the model's pick.

Runs are resumable and parallel: every finished piece of work (signal
documents, sub-questions, counterfactuals, one question x setting) is appended
to a JSONL file in the output folder and skipped on the next run; LLM calls
run on a thread pool of ``max_workers``. Transport failures (timeouts, server
down) are counted as errors and not cached, so a rerun retries them; an
unreadable model reply is cached as a wrong answer (that is the model's score).
"""
from __future__ import annotations

import dataclasses
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ...generation.llm import LLMBadResponse, LLMError
from ...generation.parsers import parse_list
from .. import metrics
from ..datasets import MCQuestion
from . import parsers, prompts, schemas
from .prompts import SCENARIOS

P_VALUES = (0, 20, 40, 60, 80, 100)
N_VALUES = (5, 10, 20)
STANDARD_N = (0, 5, 20)  # 0: the no-retrieval baseline


@dataclass(frozen=True)
class ContextDoc:
    """One document shown to the model, marked signal or noise.

    ``doc_id`` is the retrieval unit (chunk id), ``source_id`` the source
    record (e.g. PMID); ``question_id`` the question whose retrieval found it.
    """

    doc_id: str
    text: str
    title: str = ""
    source_id: str = ""
    question_id: str = ""
    is_signal: bool = True
    counterfactual: bool = False

    @property
    def kind(self) -> str:
        if self.counterfactual:
            return "counterfactual"
        return "signal" if self.is_signal else "noise"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ContextDoc":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def n_signal(n: int, p: float) -> int:
    """Signal documents in a context of ``n`` at signal ratio ``p`` percent: ``round(n*p/100)``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 100:
        raise ValueError(f"p must be a percentage in [0, 100], got {p!r}")
    return round(n * p / 100)


def compose_context(
    signal_docs: Sequence[ContextDoc],
    noise_pool: Sequence[ContextDoc],
    n: int,
    p: float,
    seed: Union[int, str],
    *,
    question_id: Optional[str] = None,
    exclude_ids: Iterable[str] = (),
) -> list[ContextDoc]:
    """``n`` documents: the top ``round(n*p/100)`` of ``signal_docs`` and noise sampled from ``noise_pool``, shuffled.

    Noise never comes from the question itself: pool documents whose
    ``question_id`` is ``question_id``, whose ``doc_id``/``source_id`` equals
    one of the signal documents' ids, or whose id is in ``exclude_ids`` are left
    out. The same arguments give the same list. Raises ``ValueError`` when
    there are not enough signal documents or not enough eligible noise.
    """
    k = n_signal(n, p)
    signal_docs = list(signal_docs)
    if len(signal_docs) < k:
        raise ValueError(f"need {k} signal documents for n={n}, p={p}, have {len(signal_docs)}")
    own = {d.doc_id for d in signal_docs} | {d.source_id for d in signal_docs if d.source_id}
    own |= set(exclude_ids)
    candidates: dict[str, ContextDoc] = {}
    for d in noise_pool:
        if question_id is not None and d.question_id == question_id:
            continue
        if d.doc_id in own or (d.source_id and d.source_id in own):
            continue
        candidates.setdefault(d.doc_id, d)
    # Sorted so the sample depends only on the pool's content, not its order.
    pool = sorted(candidates.values(), key=lambda d: (d.question_id, d.doc_id))
    if len(pool) < n - k:
        raise ValueError(f"need {n - k} noise documents for n={n}, p={p}, the pool has {len(pool)} eligible")
    rng = random.Random(str(seed))
    chosen = [dataclasses.replace(d, is_signal=True) for d in signal_docs[:k]]
    chosen += [dataclasses.replace(d, is_signal=False) for d in rng.sample(pool, n - k)]
    rng.shuffle(chosen)
    return chosen


def compose_robustness_context(
    signal_docs: Sequence[ContextDoc],
    counterfactuals: Mapping[str, ContextDoc],
    n: int,
    p: float,
    seed: Union[int, str],
) -> list[ContextDoc]:
    """The top ``n`` signal documents with all but ``round(n*p/100)`` swapped for counterfactual versions.

    ``counterfactuals`` maps a signal ``doc_id`` to its rewritten document.
    Which documents are swapped and the final order are seeded. Raises
    ``ValueError`` when documents or needed counterfactuals are missing.
    """
    top = list(signal_docs)[:n]
    if len(top) < n:
        raise ValueError(f"need {n} signal documents for robustness n={n}, have {len(top)}")
    rng, swap = _robustness_draw(n, p, seed)
    out = []
    for i, d in enumerate(top):
        if i in swap:
            cf = counterfactuals.get(d.doc_id)
            if cf is None:
                raise ValueError(f"no counterfactual version of document {d.doc_id}")
            out.append(dataclasses.replace(cf, doc_id=d.doc_id, is_signal=True, counterfactual=True))
        else:
            out.append(dataclasses.replace(d, is_signal=True, counterfactual=False))
    rng.shuffle(out)
    return out


def _robustness_draw(n: int, p: float, seed: Union[int, str]) -> tuple[random.Random, set[int]]:
    """The seeded generator of a robustness context and the positions (0-based, in the top ``n``) it swaps for
    counterfactuals; the generator goes on to shuffle the context."""
    rng = random.Random(str(seed))
    return rng, set(rng.sample(range(n), n - n_signal(n, p)))


def robustness_swaps(n: int, p: float, seed: Union[int, str]) -> set[int]:
    """Positions (0-based) among the top ``n`` signal documents that :func:`compose_robustness_context` replaces
    with counterfactual versions for these arguments: the only documents that need a rewrite."""
    return _robustness_draw(n, p, seed)[1]


@dataclass(frozen=True)
class Setting:
    """One evaluation condition: scenario, number of documents ``n`` and signal ratio ``p`` (%)."""

    scenario: str
    n: int
    p: int = 100

    @property
    def key(self) -> str:
        if self.scenario == "standard":
            return f"standard-n{self.n}"
        return f"{self.scenario}-n{self.n}-p{self.p}"

    @property
    def needs_sub_questions(self) -> bool:
        return self.scenario in ("integration", "robustness")


def make_settings(
    scenarios: Sequence[str] = SCENARIOS,
    n_values: Sequence[int] = N_VALUES,
    p_values: Sequence[int] = P_VALUES,
    standard_n: Sequence[int] = STANDARD_N,
) -> list[Setting]:
    """All settings of the chosen scenarios (standard: ``standard_n``, where 0 is the no-retrieval baseline;
    others: ``n_values`` x ``p_values``)."""
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        raise ValueError(f"unknown MedRGB scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    for n in list(n_values) + [n for n in standard_n if n != 0]:
        n_signal(n, 100)
    for p in p_values:
        n_signal(1, p)
    out = []
    for s in scenarios:
        if s == "standard":
            out += [Setting(s, n, 100) for n in standard_n]
        else:
            out += [Setting(s, n, p) for n in n_values for p in p_values]
    return out


@dataclass
class ItemResult:
    """The model's answer for one question in one setting, with everything needed to score it."""

    question_id: str
    setting: str
    scenario: str
    n: int
    p: int
    gold: str
    choice: Optional[str]  # option letter, "insufficient information", or None when unreadable
    correct: bool
    doc_ids: list[str]  # in the order shown (document k is doc_ids[k-1])
    doc_kinds: list[str]  # signal | noise | counterfactual, same order
    relevant_pred: Optional[list[str]] = None  # sufficiency: ids said to be relevant
    detected_pred: Optional[list[str]] = None  # robustness: ids said to contain an error
    sub_questions: list[str] = field(default_factory=list)
    sub_golds: list[str] = field(default_factory=list)
    sub_preds: list[Optional[str]] = field(default_factory=list)
    judge: list[float] = field(default_factory=list)
    parse_error: str = ""
    raw: str = ""

    @property
    def noise_ids(self) -> list[str]:
        return [d for d, k in zip(self.doc_ids, self.doc_kinds) if k == "noise"]

    @property
    def counterfactual_ids(self) -> list[str]:
        return [d for d, k in zip(self.doc_ids, self.doc_kinds) if k == "counterfactual"]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ItemResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def score_setting(items: Sequence[ItemResult]) -> dict[str, Any]:
    """Metrics of one setting: accuracy, plus the scenario's own (None where they do not apply)."""
    out: dict[str, Any] = {"count": len(items)}
    if not items:
        return out
    out["accuracy"] = metrics.accuracy([i.choice for i in items], [i.gold for i in items])
    out["unreadable"] = sum(i.choice is None for i in items)
    out["insufficient_share"] = metrics.insufficient_share([i.choice for i in items])
    scenario = items[0].scenario
    if scenario == "sufficiency":
        labelled = [i for i in items if i.relevant_pred is not None]
        out["noise_detection_accuracy"] = (
            metrics.noise_detection_accuracy(
                [[d for d in i.doc_ids if d not in set(i.relevant_pred or [])] for i in labelled],
                [i.noise_ids for i in labelled],
                [i.doc_ids for i in labelled],
            )
            if labelled
            else None
        )
    if scenario in ("integration", "robustness"):
        out.update(_sub_scores(items))
    if scenario == "robustness":
        with_cf = [i for i in items if i.counterfactual_ids and i.detected_pred is not None]
        out["fact_detection_rate"] = (
            metrics.fact_detection_rate([i.detected_pred or [] for i in with_cf],
                                        [i.counterfactual_ids for i in with_cf])
            if with_cf
            else None
        )
        analysed = [i for i in items if i.detected_pred is not None]
        out["false_alarm_rate"] = (
            metrics.false_alarm_rate(
                [i.detected_pred or [] for i in analysed],
                [i.counterfactual_ids for i in analysed],
                [i.doc_ids for i in analysed],
            )
            if analysed
            else None
        )
    return out


def _sub_scores(items: Sequence[ItemResult]) -> dict[str, Any]:
    """Sub-question scores: exact match against the gold sub-answers, and the LLM judge's mean."""
    with_subs = [i for i in items if i.sub_golds]
    judged = [s for i in items for s in i.judge]
    return {
        "sub_answer_em": metrics.sub_answer_exact_match([i.sub_preds for i in with_subs],
                                                        [i.sub_golds for i in with_subs]) if with_subs else None,
        "judge_score": metrics.judge_score(judged) if judged else None,
    }


# --------------------------------------------------------------------------- caching


class JsonlCache:
    """Append-only JSONL store of finished work, keyed by a string; safe across threads.

    A torn last line (a run killed mid-write) is ignored on load; any other
    unreadable line raises ``ValueError`` naming the file and line.
    """

    def __init__(self, path: Path, key: Callable[[dict], str]):
        self.path = path
        self._key = key
        self._lock = threading.Lock()
        self.data: dict[str, dict] = {}
        if path.exists():
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    if i == len(lines) - 1 and not text.endswith("\n"):
                        # torn write of a killed run: drop it so appends stay line-aligned
                        tmp = path.with_suffix(".tmp")
                        tmp.write_text("".join(ln + "\n" for ln in lines[:-1]), encoding="utf-8")
                        tmp.replace(path)
                        break
                    raise ValueError(f"{path}: line {i + 1} is not valid JSON ({exc})") from exc
                self.data[key(rec)] = rec
            else:
                if text and not text.endswith("\n"):  # complete but unterminated last line
                    with path.open("a", encoding="utf-8") as fh:
                        fh.write("\n")

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str) -> Optional[dict]:
        return self.data.get(key)

    def add(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False)
        with self._lock:
            self.data[self._key(rec)] = rec
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()


# --------------------------------------------------------------------------- runner

SearchFn = Callable[[str, int], Sequence[Any]]


def hits_to_docs(hits: Sequence[Any], question_id: str) -> list[ContextDoc]:
    """Retrieval hits (``Hit`` objects or dicts with chunk_id/document_id/text/title) as signal documents."""
    out = []
    for h in hits:
        get = h.get if isinstance(h, Mapping) else (lambda k, default=None, h=h: getattr(h, k, default))
        text = get("text")
        doc_id = get("chunk_id") or get("doc_id") or get("id") or get("document_id")
        if not isinstance(text, str) or doc_id is None:
            raise TypeError("search results must have a text and a chunk_id (or id)")
        out.append(
            ContextDoc(
                doc_id=str(doc_id),
                text=text,
                title=str(get("title", "") or ""),
                source_id=str(get("document_id", "") or ""),
                question_id=question_id,
            )
        )
    return out


def _question_prompt(q: MCQuestion) -> str:
    return q.question + "\n" + "\n".join(f"{k}. {v}" for k, v in q.options.items())


#: Failures that are the model's own (unreadable or rejected replies): scored, cached.
MODEL_FAILURES = (ValueError, LLMBadResponse)


@dataclass
class MedRGBRun:
    """Everything one run produced: per-item results, per-setting metrics and errors."""

    dataset: str
    model: str
    settings: list[Setting]
    items: list[ItemResult]
    errors: list[dict]
    metrics: dict[str, dict[str, Any]]
    judge: dict[str, Any] = field(default_factory=dict)  # model, separate (from the model under test), used

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "model": self.model,
            "judge": self.judge,
            "settings": {
                s.key: {"scenario": s.scenario, "n": s.n, "p": s.p, **self.metrics.get(s.key, {})}
                for s in self.settings
            },
            "errors": self.errors,
        }


class MedRGBRunner:
    """Run MedRGB scenarios for one dataset with one LLM backend and one retriever.

    ``search_fn(query, k)`` returns ranked hits (``Hit`` or dicts with
    ``chunk_id``, ``document_id``, ``text``, ``title``); it is called under a
    lock, so a retriever need not be thread-safe. ``out_dir`` holds the caches
    (``signal.jsonl``, ``sub_qa.jsonl``, ``counterfactual.jsonl``,
    ``items.jsonl``) and ``run.json`` (the options the caches depend on; a
    rerun with other options in the same folder is refused). ``judge_backend`` /
    ``judge_model``: the LLM that grades sub-answers (default: ``backend``, the
    model under test, which the results then say).
    """

    def __init__(
        self,
        backend: Any,
        search_fn: SearchFn,
        out_dir: Union[str, Path],
        *,
        dataset: str,
        model: str = "",
        collection: str = "",
        seed: int = 0,
        max_workers: Optional[int] = None,
        per_topic: int = 3,
        n_topics: Optional[int] = None,
        n_sub_questions: int = 3,
        judge: bool = True,
        judge_backend: Any = None,
        judge_model: str = "",
        max_tokens: int = 1024,
        doc_max_chars: Optional[int] = 1500,
        deadline_ms: Optional[float] = None,
        max_errors: int = 20,
        progress: bool = True,
    ) -> None:
        if max_workers is None:
            max_workers = int(getattr(backend, "max_concurrency", 0) or 4)
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if per_topic < 1:
            raise ValueError(f"per_topic must be >= 1, got {per_topic}")
        self.backend = backend
        self.search_fn = search_fn
        self.out_dir = Path(out_dir)
        self.dataset = dataset
        self.model = model or str(getattr(backend, "model", "") or type(backend).__name__)
        self.collection = collection
        self.seed = seed
        self.max_workers = max_workers
        self.per_topic = per_topic
        self.n_topics = n_topics
        self.n_sub_questions = n_sub_questions
        self.judge = judge
        self.judge_backend = judge_backend if judge_backend is not None else backend
        self.judge_separate = judge_backend is not None
        self.judge_model = (judge_model or str(getattr(judge_backend, "model", "") or type(judge_backend).__name__)
                            if self.judge_separate else self.model)
        self.max_tokens = max_tokens
        self.doc_max_chars = doc_max_chars
        self.deadline_ms = deadline_ms
        self.max_errors = max_errors
        self.progress = progress
        self._search_lock = threading.Lock()
        self._error_lock = threading.Lock()
        self._errors: list[dict] = []

    # -- plumbing ---------------------------------------------------------

    def _generate(self, messages: list[dict], response_format: Union[None, str, dict] = None,
                  backend: Any = None) -> str:
        return (backend or self.backend).generate(
            messages,
            max_tokens=self.max_tokens,
            temperature=0.0,
            deadline_ms=self.deadline_ms,
            response_format=response_format,
        )

    def _search(self, query: str, k: int, question_id: str) -> list[ContextDoc]:
        with self._search_lock:
            hits = self.search_fn(query, k)
        return hits_to_docs(hits, question_id)

    def _record_error(self, stage: str, question_id: str, exc: BaseException, setting: str = "") -> None:
        with self._error_lock:
            self._errors.append(
                {"stage": stage, "question_id": question_id, "setting": setting, "error": f"{type(exc).__name__}: {exc}"}
            )
            transport = sum(1 for e in self._errors if e["stage"] != "compose")
        if transport > self.max_errors:
            raise RuntimeError(
                f"MedRGB run stopped after {transport} LLM errors (last: {type(exc).__name__}: {exc}); "
                "check the backend and rerun: finished work is cached"
            ) from exc

    def _parallel(self, fn: Callable[[Any], None], work: Sequence[Any], desc: str) -> None:
        """Run ``fn`` over ``work`` on the thread pool; the first failure cancels what has not started."""
        if not work:
            return
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(work), desc=desc, unit="item", leave=False)
        pool = ThreadPoolExecutor(max_workers=self.max_workers)
        try:
            futures = [pool.submit(fn, w) for w in work]
            for f in as_completed(futures):
                f.result()  # re-raises, e.g. the RuntimeError of too many LLM errors
                if bar is not None:
                    bar.update(1)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            if bar is not None:
                bar.close()

    def _check_run_file(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        run_file = self.out_dir / "run.json"
        config = {
            "dataset": self.dataset,
            "model": self.model,
            "collection": self.collection,
            "seed": self.seed,
            "per_topic": self.per_topic,
            "n_topics": self.n_topics,
            "n_sub_questions": self.n_sub_questions,
            "judge_model": self.judge_model,
        }
        before = {"judge_model": self.model}  # runs cached before the judge was recorded used the model under test
        if run_file.exists():
            old = json.loads(run_file.read_text(encoding="utf-8"))
            was = {k: old.get(k, before.get(k)) for k in config}
            diff = {k: (was[k], v) for k, v in config.items() if was[k] != v}
            if diff:
                raise ValueError(
                    f"{run_file}: this folder caches a run with other options {diff} (old, new); "
                    "use a new --out folder or delete it"
                )
        else:
            tmp = run_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(config, indent=2), encoding="utf-8")
            tmp.replace(run_file)

    # -- phase 1: signal documents ----------------------------------------

    def _signal_for(self, q: MCQuestion, need: int, cache: JsonlCache) -> None:

        n_topics = self.n_topics or max(1, -(-need // self.per_topic))
        topics_error = ""
        try:
            text = self._generate(prompts.search_topics_messages(_question_prompt(q), n=n_topics))
            topics = [t for t in parse_list(text) if t.strip()][:n_topics]
        except MODEL_FAILURES as exc:  # unreadable topic list: search with the question alone
            topics, topics_error = [], f"{type(exc).__name__}: {exc}"
        except LLMError as exc:  # transport: not cached, retried on the next run
            self._record_error("topics", q.id, exc)
            return
        per_topic = [self._search(t, self.per_topic, q.id) for t in topics]
        docs: dict[str, ContextDoc] = {}
        for rank in range(self.per_topic):  # interleave: every topic's best first
            for ranked in per_topic:
                if rank < len(ranked):
                    docs.setdefault(ranked[rank].doc_id, ranked[rank])
        if len(docs) < need:
            for d in self._search(q.question, need + len(docs), q.id):
                docs.setdefault(d.doc_id, d)
                if len(docs) >= need:
                    break
        cache.add(
            {
                "question_id": q.id,
                "need": need,
                "topics": topics,
                "topics_error": topics_error,
                "docs": [d.to_dict() for d in docs.values()],
            }
        )

    # -- phase 2: sub-questions and counterfactuals ------------------------

    def _sub_qa_for(self, q: MCQuestion, signal: list[ContextDoc], cache: JsonlCache) -> None:

        docs = [{"title": d.title, "text": d.text} for d in signal[:5]]
        try:
            text = self._generate(
                prompts.sub_qa_messages(q.question, docs, n=self.n_sub_questions, max_chars=self.doc_max_chars)
            )
            pairs = parsers.parse_sub_qa(text)
            error = ""
        except MODEL_FAILURES as exc:
            pairs, error = [], f"{type(exc).__name__}: {exc}"
        except LLMError as exc:
            self._record_error("sub_qa", q.id, exc)
            return
        cache.add({"question_id": q.id, "sub_qa": [_pair(p) for p in pairs], "error": error})

    def _counterfactual_for(self, job: tuple[MCQuestion, ContextDoc], cache: JsonlCache) -> None:

        q, doc = job
        try:
            text = self._generate(prompts.counterfactual_messages(doc.text, q.answer_text), "json")
            parsed = parsers.parse_counterfactual(text)
        except MODEL_FAILURES as exc:
            # An unusable rewrite is recorded; robustness items needing it are reported, not scored.
            cache.add({"question_id": q.id, "doc_id": doc.doc_id, "text": None, "error": f"{type(exc).__name__}: {exc}"})
            return
        except LLMError as exc:
            self._record_error("counterfactual", q.id, exc)
            return
        new_text = parsed.get("document") if isinstance(parsed, Mapping) else getattr(parsed, "document", None)
        answer = parsed.get("counterfactual_answer") if isinstance(parsed, Mapping) else getattr(
            parsed, "counterfactual_answer", None
        )
        cache.add(
            {"question_id": q.id, "doc_id": doc.doc_id, "text": new_text, "counterfactual_answer": answer or ""}
        )

    # -- phase 3: items ----------------------------------------------------

    def _context(
        self,
        q: MCQuestion,
        setting: Setting,
        signal: list[ContextDoc],
        pool: list[ContextDoc],
        cfs: Mapping[str, ContextDoc],
    ) -> list[ContextDoc]:
        seed = self._seed_of(q, setting)
        if setting.scenario == "standard":
            if len(signal) < setting.n:
                raise ValueError(f"need {setting.n} retrieved documents, have {len(signal)}")
            return [dataclasses.replace(d, is_signal=True) for d in signal[: setting.n]]
        if setting.scenario == "robustness":
            return compose_robustness_context(signal, cfs, setting.n, setting.p, seed)
        return compose_context(signal, pool, setting.n, setting.p, seed, question_id=q.id)

    def _seed_of(self, q: MCQuestion, setting: Setting) -> str:
        """The seed of a question's context in a setting (noise draw, swaps, order)."""
        return f"{self.seed}|{q.id}|{setting.n}|{setting.p}"

    def _item(self, job: tuple, cache: JsonlCache) -> None:

        q, setting, signal, pool, cfs, sub_qa = job
        try:
            docs = self._context(q, setting, signal, pool, cfs)
        except ValueError as exc:
            self._record_error("compose", q.id, exc, setting.key)
            return
        sub_questions = [s["question"] for s in sub_qa] if setting.needs_sub_questions else []
        if setting.scenario == "integration" and not sub_questions:
            self._record_error("compose", q.id, ValueError("no sub-questions were generated"), setting.key)
            return
        shown = [{"title": d.title, "text": d.text} for d in docs]
        messages = prompts.medrgb_messages(
            setting.scenario, q.question, q.options, shown, sub_questions=sub_questions or None,
            max_chars=self.doc_max_chars,
        )
        # the reply's fields as a schema: a constrained decoder writes each of them (module docstring, step 5)
        reply_format = schemas.medrgb_response_format(
            setting.scenario, q.options, len(shown), len(sub_questions), max_tokens=self.max_tokens)
        failure = ""
        try:
            raw = self._generate(messages, reply_format)
        except LLMBadResponse as exc:  # e.g. the context is too long for the model: scored as unreadable
            raw, failure = "", f"{type(exc).__name__}: {exc}"
        except LLMError as exc:
            self._record_error("answer", q.id, exc, setting.key)
            return
        item = ItemResult(
            question_id=q.id,
            setting=setting.key,
            scenario=setting.scenario,
            n=setting.n,
            p=setting.p,
            gold=q.answer,
            choice=None,
            correct=False,
            doc_ids=[d.doc_id for d in docs],
            doc_kinds=[d.kind for d in docs],
            sub_questions=sub_questions,
            sub_golds=[s["answer"] for s in sub_qa] if sub_questions else [],
            raw=raw[:8000],
        )
        parsed = None
        if not failure:
            try:
                parsed = parsers.parse_medrgb(raw, setting.scenario, q.options)
            except ValueError as exc:
                failure = str(exc)
        if parsed is None:
            item.parse_error = failure
            if sub_questions:  # unreadable: every sub-answer is wrong too
                item.sub_preds = [None] * len(sub_questions)
                item.judge = [0.0] * len(sub_questions) if self.judge else []
            cache.add(item.to_dict())
            return
        _fill_from_parsed(item, parsed)
        if self.judge and sub_questions:
            try:
                item.judge = [self._judge(sq, gold, pred)
                              for sq, gold, pred in zip(sub_questions, item.sub_golds, item.sub_preds)]
            except LLMError as exc:  # transport (model failures score 0 inside _judge)
                self._record_error("judge", q.id, exc, setting.key)
                return
        cache.add(item.to_dict())

    def _judge(self, question: str, gold: str, pred: Optional[str]) -> float:

        if not pred:
            return 0.0
        try:
            reply = self._generate(prompts.judge_messages(question, gold, pred), backend=self.judge_backend)
            return float(parsers.parse_judge(reply))
        except MODEL_FAILURES:
            return 0.0  # an unreadable or rejected verdict gives no credit

    # -- the run ------------------------------------------------------------

    def run(self, questions: Sequence[MCQuestion], settings: Sequence[Setting]) -> MedRGBRun:
        """Run (or resume) every question in every setting; returns the items and per-setting metrics."""
        if not questions:
            raise ValueError("no questions to evaluate")
        ids = [q.id for q in questions]
        if len(set(ids)) != len(ids):
            raise ValueError("question ids must be unique")
        if not settings:
            raise ValueError("no settings to run")
        self._check_run_file()
        self._errors = []
        need = max(s.n for s in settings)  # 0: only the no-retrieval baseline, nothing to retrieve

        signal_cache = JsonlCache(self.out_dir / "signal.jsonl", lambda r: r["question_id"])

        def signal_missing(q: MCQuestion) -> bool:
            rec = signal_cache.get(q.id)
            # a record made for smaller contexts is redone (the later line wins on load)
            return rec is None or (len(rec["docs"]) < need and rec.get("need", 0) < need)

        todo = [q for q in questions if signal_missing(q)] if need > 0 else []
        self._parallel(lambda q: self._signal_for(q, need, signal_cache), todo, "signal documents")
        signal = {
            q.id: [ContextDoc.from_dict(d) for d in (signal_cache.get(q.id) or {}).get("docs", [])]
            for q in questions
            if q.id in signal_cache
        }
        pool = [d for q in questions for d in signal.get(q.id, [])]  # question order: deterministic

        sub_cache = JsonlCache(self.out_dir / "sub_qa.jsonl", lambda r: r["question_id"])
        if any(s.needs_sub_questions for s in settings):
            todo = [q for q in questions if q.id in signal and q.id not in sub_cache]
            self._parallel(lambda q: self._sub_qa_for(q, signal[q.id], sub_cache), todo, "sub-questions")
        cf_cache = JsonlCache(self.out_dir / "counterfactual.jsonl", lambda r: f"{r['question_id']}|{r['doc_id']}")
        robust = [s for s in settings if s.scenario == "robustness"]
        # one rewrite per document that some robustness setting swaps (an LLM call each: only those)
        rewrites = []
        for q in questions:
            swapped = {i for s in robust for i in robustness_swaps(s.n, s.p, self._seed_of(q, s))}
            rewrites += [(q, d) for i, d in enumerate(signal.get(q.id, [])) if i in swapped
                         and f"{q.id}|{d.doc_id}" not in cf_cache]
        self._parallel(lambda job: self._counterfactual_for(job, cf_cache), rewrites, "counterfactuals")

        item_cache = JsonlCache(self.out_dir / "items.jsonl", lambda r: f"{r['question_id']}|{r['setting']}")
        jobs: list[tuple] = []
        for q in questions:
            baseline = [s for s in settings if s.n == 0 and f"{q.id}|{s.key}" not in item_cache]
            jobs += [(q, s, [], [], {}, []) for s in baseline]  # no retrieval: needs no signal documents
            if q.id not in signal:
                continue
            cfs = {}
            for d in signal[q.id]:
                rec = cf_cache.get(f"{q.id}|{d.doc_id}")
                if rec and rec.get("text"):
                    cfs[d.doc_id] = dataclasses.replace(d, text=rec["text"])
            sub = (sub_cache.get(q.id) or {}).get("sub_qa", [])
            for s in settings:
                if s.n > 0 and f"{q.id}|{s.key}" not in item_cache:
                    jobs.append((q, s, signal[q.id], pool, cfs, sub))
        self._parallel(lambda job: self._item(job, item_cache), jobs, "answers")

        wanted = {q.id for q in questions}
        items = [
            ItemResult.from_dict(r)
            for r in item_cache.data.values()
            if r["question_id"] in wanted and any(r["setting"] == s.key for s in settings)
        ]
        by_setting = {s.key: [i for i in items if i.setting == s.key] for s in settings}
        scores = {}
        for s in settings:
            scores[s.key] = score_setting(by_setting[s.key])
            scores[s.key]["errors"] = sum(1 for e in self._errors if e["setting"] == s.key)
        judge = {"model": self.judge_model, "separate": self.judge_separate, "used": self.judge}
        run = MedRGBRun(self.dataset, self.model, list(settings), items, list(self._errors), scores, judge)
        tmp = self.out_dir / "results.json.tmp"
        tmp.write_text(json.dumps(run.to_dict(), indent=2), encoding="utf-8")
        tmp.replace(self.out_dir / "results.json")
        return run


def _pair(p: Any) -> dict:
    if isinstance(p, Mapping):
        return {"question": str(p["question"]), "answer": str(p["answer"])}
    if isinstance(p, (tuple, list)) and len(p) == 2:
        return {"question": str(p[0]), "answer": str(p[1])}
    return {"question": str(p.question), "answer": str(p.answer)}


def _fill_from_parsed(item: ItemResult, parsed: Mapping[str, Any]) -> None:
    """Copy a ``parsers.parse_medrgb`` result (document numbers from 1) into ``item``."""

    def ids(numbers: Optional[Iterable[Any]]) -> Optional[list[str]]:
        if numbers is None:
            return None
        out = []
        for num in numbers:
            k = int(num)
            if 1 <= k <= len(item.doc_ids):
                out.append(item.doc_ids[k - 1])
        return out

    choice = parsed.get("choice")
    item.choice = choice if isinstance(choice, str) and choice else None
    item.correct = item.choice is not None and item.choice.upper() == item.gold.upper()
    if item.scenario == "sufficiency":
        item.relevant_pred = ids(parsed.get("relevant_documents"))
    if item.scenario == "robustness":
        item.detected_pred = ids(parsed.get("noisy_documents"))
    if item.sub_questions:  # integration and robustness
        subs = [s.get("answer") if isinstance(s, Mapping) else str(s) for s in parsed.get("sub_answers") or []]
        item.sub_preds = [subs[j] if j < len(subs) else None for j in range(len(item.sub_questions))]
