"""BioASQ participation: a test batch to the submission file of Phase A, A+ or B, resumable, and its score.

:class:`BatchRun` answers the questions of a test batch (``load_bioasq(path, golden=False)``) one by one:

- Phase ``A``: the question is searched (``search_fn(question, fetch_k) -> hits``, e.g. a
  :class:`~medretrieve.retrieval.retriever.Retriever` over a collection, PubMed or both); the entry holds the
  first ``k`` (10) distinct documents as PubMed URLs in rank order and up to ``k`` snippets, the hits that know
  their place in the article (``Hit.span``: ``beginSection`` / ``endSection`` and the character offsets).
  With ``prune`` the snippets (and the prompt's evidence) are :func:`~medretrieve.retrieval.recovery.prune`'s
  best ``prune`` hits, at most ``prune_per_document`` from one article.
- Phase ``A+``: the same evidence, and exact and ideal answers written from it by an LLM ``backend``; without one
  the answers are extractive (:func:`~medretrieve.generation.extractive.extractive_bioasq`).
- Phase ``B``: answers from the snippets the batch gives (no retrieval).

With an LLM, a reply that holds no exact answer for a yes/no, factoid or list question (unreadable, or an empty
list) gets one read from the snippets shown to the model, as the extractive answers are
(:func:`~medretrieve.generation.extractive.extractive_bioasq` over the model's ideal answer and the snippets);
the entry then says ``"exact_answer_from": "snippets"`` (the question's cache file and ``results.json``; the
submission holds the BioASQ fields only).

Resuming: each finished question is written to ``out/questions/<id>.json`` at once, and a rerun over the same folder
skips them. A cached entry is used only when every field a submission needs checks and it was not edited since it
was written (:mod:`.run_cache`); any other (cut short, edited, another question's) is answered again and rewritten,
so a damaged cache never stops the batch nor reaches the submission. A run holds the folder's lock
(``out/.lock``, ``flock``): a second run of the same folder is refused while one is running, and the temporary
files killed runs left there are removed (their names only);
``out/run.json`` records what the answers depend on (phase, sources, stages), and a rerun with other options in the
same folder is refused rather than mixing two systems' answers. A question that fails (an LLM or PubMed error,
anything raised) is logged and left out of the cache, so the next run retries it; the batch goes on.
``out/log.jsonl`` holds one line per question and run: its id, ``ok`` / ``cached`` / ``failed``, the time it took
(ms) and the error. An unreadable LLM reply is the model's answer (no exact answer, its prose as the ideal answer)
and is cached.

:func:`score_submission` scores submission entries against a golden file the way BioASQ does: document and
snippet MAP / P / R / nDCG / MRR at 10 (:func:`~..evaluate.retrieval_row`, snippets matched by their offsets in
their section), exact answers per type and ROUGE of the ideal answers (:func:`~.answers.evaluate_bioasq_answers`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import logging
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from ..._files import read_json, write_json_atomic
from ...corpus.sources import pmid_from_url
from ...generation.extractive import extractive_bioasq
from ...generation.llm import LLMContextTooLong
from ...retrieval.recovery import prune
from .. import metrics
from ..evaluate import retrieval_means, retrieval_row
from .answers import BioASQAnswer, evaluate_bioasq_answers, generate_bioasq_answer
from .evidence import PUBMED_URL, bioasq_evidence
from .golden import BioASQQuestion
from .run_cache import SEAL_KEY, entry_problem, remove_temp_files, seal

log = logging.getLogger(__name__)

PHASES = ("A", "A+", "B")
SearchFn = Callable[[str, int], Sequence[Any]]
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


@dataclass
class BatchResult:
    """What a run did: the submission ``entries`` (batch order, failed questions left out), the failures
    (``{"id", "error"}``), how many questions were answered now and read from the cache, and the wall time (ms)."""

    entries: list[dict]
    failures: list[dict] = field(default_factory=list)
    answered: int = 0
    cached: int = 0
    elapsed_ms: float = 0.0


class BatchRun:
    """One system's run over a BioASQ test batch (module docstring).

    - ``out_dir``: the run's folder (created; the per-question cache, ``run.json``, ``log.jsonl``).
    - ``phase``: ``"A"``, ``"A+"`` or ``"B"``; ``search_fn`` is needed in A and A+.
    - ``backend``: an LLM backend (``generate(messages, ...)``) for A+ and B; None: extractive answers.
    - ``k``: documents and snippets per question (BioASQ takes at most 10); ``fetch_k``: hits asked from
      ``search_fn`` (more than ``k``, so ``k`` distinct documents fill when an article has several chunks).
    - ``prune`` / ``prune_per_document``: the snippets (and the prompt's evidence) cut to the best ``prune``,
      at most ``prune_per_document`` per article (None: the first ``k`` hits).
    - ``max_tokens`` / ``max_chars``: the LLM's reply length (tokens) and each snippet's length in the prompt
      (characters); ``llm_deadline_ms``: each LLM call's time limit (ms; None: the backend's own timeout).
    - ``config``: what else the answers depend on (sources, stages, model), recorded in ``run.json``.
    """

    def __init__(self, out_dir: Union[str, Path], phase: str, search_fn: Optional[SearchFn] = None,
                 backend: Any = None, *, k: int = 10, fetch_k: int = 30, prune: Optional[int] = None,
                 prune_per_document: Optional[int] = None, max_tokens: int = 512, max_chars: Optional[int] = 1500,
                 llm_deadline_ms: Optional[float] = None, config: Optional[Mapping[str, Any]] = None,
                 progress: bool = True) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
        if phase == "B" and search_fn is not None:
            raise ValueError("Phase B answers from the batch's own snippets: give no collection and no PubMed")
        if phase != "B" and search_fn is None:
            raise ValueError(f"Phase {phase} retrieves its evidence: give a collection, PubMed, or both")
        if phase == "A" and backend is not None:
            raise ValueError("Phase A submits documents and snippets only: an LLM has nothing to answer")
        for name, value, low in (("k", k, 1), ("fetch_k", fetch_k, k), ("max_tokens", max_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if k > 10:
            raise ValueError(f"BioASQ takes at most 10 documents and snippets per question, got k={k}")
        for name, cut in (("prune", prune), ("prune_per_document", prune_per_document)):
            if cut is not None and (isinstance(cut, bool) or not isinstance(cut, int) or cut < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {cut!r}")
        if prune_per_document is not None and prune is None:
            raise ValueError("prune_per_document goes with prune (the snippets kept per question)")
        self.out = Path(out_dir)
        self.phase = phase
        self.search_fn = search_fn
        self.backend = backend
        self.k = k
        self.fetch_k = fetch_k
        self.prune = prune
        self.prune_per_document = prune_per_document
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.llm_deadline_ms = llm_deadline_ms
        self.progress = progress
        self._lock_fd: Optional[int] = None
        self.config = {"phase": phase, "k": k, "fetch_k": fetch_k, "prune": prune,
                       "prune_per_document": prune_per_document, "max_tokens": max_tokens, "max_chars": max_chars,
                       "answers": "extractive" if backend is None else "llm", **dict(config or {})}

    # ------------------------------------------------------------- the folder
    def _open(self) -> None:
        """Create the folder, or check that the run it holds has this run's options."""
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "questions").mkdir(exist_ok=True)
        path = self.out / "run.json"
        config = json.loads(json.dumps(self.config, default=str))  # as it reads back from the file
        if path.is_file():
            held = read_json(path)
            if held != config:
                diff = sorted(k for k in set(held) | set(config) if held.get(k) != config.get(k))
                raise ValueError(f"{self.out} holds a run with other options ({', '.join(diff)}); give another "
                                 "--out, or the same options to resume it")
        else:
            write_json_atomic(path, config)

    def _cache_path(self, qid: str) -> Path:
        name = qid if _SAFE_ID.match(qid) else hashlib.sha1(qid.encode()).hexdigest()
        return self.out / "questions" / f"{name}.json"

    def _cached(self, q: BioASQQuestion, path: Path) -> Optional[dict]:
        """The entry cached for ``q``, or None when there is none or the file does not hold ``q``'s entry (cut
        short, edited, another question's): ``q`` is then answered again and the file rewritten, as a missing one
        would be, instead of stopping the batch or submitting another question's answers."""
        if not path.is_file():
            return None
        try:
            entry = read_json(path)
        except ValueError as exc:
            problem = str(exc)
        else:
            why = entry_problem(entry, q.id, q.type, self.phase, self.k)
            if why is None:
                return {key: value for key, value in entry.items() if key != SEAL_KEY}
            problem = f"{path}: {why}"
        log.warning("%s; answered again", problem)
        return None

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the run folder's lock (``out/.lock``) for the block, after removing what killed runs left there;
        ValueError when another run holds it. :meth:`run` holds it; a caller that writes the submission into the
        folder holds it across both (it is reentrant)."""
        if self._lock_fd is not None:
            yield
            return
        self.out.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.out / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(f"another run is writing {self.out} (it holds {self.out / '.lock'}); wait for it to "
                             "end or give another --out") from None
        self._lock_fd = fd
        try:
            for folder in (self.out, self.out / "questions"):  # no live run owns them: this one holds the lock
                for name in remove_temp_files(folder):
                    log.info("removed %s, left by a run that was killed", folder / name)
            yield
        finally:
            self._lock_fd = None
            os.close(fd)

    def _log(self, qid: str, status: str, elapsed_ms: float, error: str = "") -> None:
        line = {"id": qid, "status": status, "ms": round(elapsed_ms, 1), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if error:
            line["error"] = error
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")

    # ------------------------------------------------------------- one question
    def _evidence(self, q: BioASQQuestion) -> tuple[dict, list]:
        """Phase A's documents and snippets, and the hits the answer is written from."""
        assert self.search_fn is not None
        hits = list(self.search_fn(q.body, self.fetch_k))
        chosen = hits
        if self.prune is not None:
            chosen = prune(hits, per_question=self.prune, per_document=self.prune_per_document or self.prune)
        found = bioasq_evidence(hits, self.k)
        snippets = bioasq_evidence(chosen, self.k)["snippets"]
        bad = [u[len(PUBMED_URL):] for u in found["documents"] if not u[len(PUBMED_URL):].isdigit()]
        if bad:
            raise ValueError(f"document ids {bad[:3]} are not PubMed ids: a BioASQ submission names PubMed "
                             "articles (build the collection from PubMed records or BioASQ files)")
        return {"documents": found["documents"], "snippets": snippets}, chosen[:self.k]

    def _answers(self, q: BioASQQuestion, evidence: Sequence[Any]) -> dict:
        if self.backend is None:
            exact, ideal = extractive_bioasq(q.body, q.type, evidence)
            return {"exact_answer": exact, "ideal_answer": ideal}
        used = list(evidence)
        while True:
            try:
                ans = generate_bioasq_answer(self.backend, q, used, self.phase, self.max_tokens, self.max_chars,
                                             self.llm_deadline_ms)
                break
            except LLMContextTooLong:
                if len(used) <= 1:
                    raise
                used = used[:len(used) // 2]  # the best-ranked (or first given) half, as Answerer does
        exact = ans.exact
        if q.type in ("factoid", "list") and isinstance(exact, list):  # the submission's shape: synonym lists
            exact = [[x] if isinstance(x, str) else list(x) for x in exact]
        out = {"exact_answer": exact, "ideal_answer": ans.ideal}
        if ans.error:
            out["parse_error"] = ans.error
        if q.type != "summary" and not exact:
            # BioASQ scores a missing exact answer as wrong: read one from the snippets the model was shown
            # (the model's own ideal answer first), as the extractive run does, and say so in the entry
            found, _ = extractive_bioasq(q.body, q.type, [{"text": ans.ideal}, *used] if ans.ideal else used)
            if found:
                out["exact_answer"] = found
                out["exact_answer_from"] = "snippets"
        if len(used) < len(evidence):
            out["note"] = (f"the prompt with {len(evidence)} snippets overflowed the model's context: answered from "
                           f"the first {len(used)}")
        return out

    def answer(self, q: BioASQQuestion) -> dict:
        """The submission entry of one question (not cached; :meth:`run` caches)."""
        entry: dict = {"id": q.id, "type": q.type}
        evidence: list = []
        if self.phase in ("A", "A+"):
            found, evidence = self._evidence(q)
            entry.update(found)
        else:
            if not q.snippets:
                raise ValueError(f"question {q.id} has no snippets: Phase B answers from the batch's snippets")
            evidence = [{"text": s.text, "document_id": s.document_id} for s in q.snippets]
        if self.phase in ("A+", "B"):
            entry.update(self._answers(q, evidence))
        return entry

    # ------------------------------------------------------------- the batch
    def run(self, questions: Sequence[BioASQQuestion]) -> BatchResult:
        """Answer every question not cached yet; returns the entries in batch order (module docstring)."""
        if not questions:
            raise ValueError("the batch holds no questions")
        ids = [q.id for q in questions]
        if len(set(ids)) != len(ids):
            raise ValueError("the batch holds a question id twice")
        with self.holding():
            return self._run(questions)

    def _run(self, questions: Sequence[BioASQQuestion]) -> BatchResult:
        self._open()
        start = time.perf_counter()
        result = BatchResult([])
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(questions), desc=f"BioASQ phase {self.phase}", unit="q")
        for q in questions:
            path = self._cache_path(q.id)
            t0 = time.perf_counter()
            cached = self._cached(q, path)
            if cached is not None:
                entry = cached
                result.cached += 1
                self._log(q.id, "cached", 0.0)
            else:
                try:
                    entry = self.answer(q)
                except Exception as exc:  # one question's failure does not stop the batch; a rerun retries it
                    ms = (time.perf_counter() - t0) * 1000.0
                    error = f"{type(exc).__name__}: {exc}"[:500]
                    log.warning("question %s failed after %.0f ms: %s", q.id, ms, error)
                    self._log(q.id, "failed", ms, error)
                    result.failures.append({"id": q.id, "error": error})
                    if bar is not None:
                        bar.update(1)
                    continue
                entry["elapsed_ms"] = (time.perf_counter() - t0) * 1000.0
                write_json_atomic(path, seal(entry))
                result.answered += 1
                self._log(q.id, "ok", entry["elapsed_ms"])
                log.info("question %s answered in %.0f ms", q.id, entry["elapsed_ms"])
            result.entries.append(entry)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        result.elapsed_ms = (time.perf_counter() - start) * 1000.0
        return result


# --------------------------------------------------------------------------- scoring


def _snippet_ref(sn: Mapping[str, Any]) -> metrics.SnippetRef:
    begin, end = sn.get("offsetInBeginSection"), sn.get("offsetInEndSection")
    return metrics.SnippetRef(document_id=pmid_from_url(str(sn.get("document", ""))), text=str(sn.get("text", "")),
                              section=str(sn.get("beginSection", "") or ""),
                              offset_begin=begin if isinstance(begin, int) else None,
                              offset_end=end if isinstance(end, int) else None)


def score_submission(entries: Sequence[Mapping[str, Any]], golden: Sequence[BioASQQuestion], k: int = 10
                     ) -> dict[str, Any]:
    """Scores of submission ``entries`` (dicts as :func:`write_bioasq_submission` writes them) on the golden
    questions they answer (module docstring): ``retrieval`` (when the entries hold documents) and ``answers``
    (when they hold ideal answers), ``count``, and ``missing`` (golden questions the entries do not answer)."""
    by_id = {str(e.get("id")): e for e in entries}
    questions = [q for q in golden if q.id in by_id]
    if not questions:
        raise ValueError("none of the submission's questions is in the golden file (the ids differ)")
    out: dict[str, Any] = {"count": len(questions), "missing": [q.id for q in golden if q.id not in by_id]}
    if any("documents" in by_id[q.id] for q in questions):
        rows = []
        for q in questions:
            e = by_id[q.id]
            docs = [pmid_from_url(u) for u in e.get("documents") or []]
            rows.append(retrieval_row(q, docs, [_snippet_ref(s) for s in e.get("snippets") or []], k))
        out["retrieval"] = {"k": k, **retrieval_means(rows), "rows": rows}
    if any("ideal_answer" in by_id[q.id] for q in questions):
        def answer(q: BioASQQuestion) -> BioASQAnswer:
            e = by_id[q.id]
            return BioASQAnswer(e.get("exact_answer"), str(e.get("ideal_answer") or ""))

        out["answers"] = evaluate_bioasq_answers(answer, questions)
    return out


def strip_batch(golden: Any, phase: str) -> dict:
    """A golden file's JSON (``{"questions": [...]}``) as BioASQ hands it to participants: ``id``, ``body`` and
    ``type`` only; in Phase B also the ``documents`` and ``snippets``."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    if not isinstance(golden, dict) or not isinstance(golden.get("questions"), list):
        raise ValueError("expected an object with a 'questions' list (BioASQ golden format)")
    keep = ("id", "body", "type") + (("documents", "snippets") if phase == "B" else ())
    return {"questions": [{key: q[key] for key in keep if isinstance(q, dict) and key in q}
                          for q in golden["questions"]]}
