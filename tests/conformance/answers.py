"""The answer doors of the conformance suite: ``Answerer.answer`` (the reference), the clients, ``POST /v1/answer``,
``medretrieve answer --json`` and MCP's ``answer`` tool, each asked the same :class:`~.doors.Request` (a question,
``k`` and the evidence's search options, :data:`medretrieve.wire.FILTER_OPTIONS`) and compared as
:func:`same_answer` says: the same evidence (ids, order, scores), the same text, abstention and cited sources, or the
same refusal naming the same option.

The server answers extractively (no LLM is configured) and retrieves within its search deadline
(:data:`medretrieve.wire.DEFAULT_DEADLINE_MS`), as the reference does; a stage that deadline cut at one door only
depends on the machine's load: :func:`compared_answers` asks such a pair again before it fails.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from medretrieve.records import Answer
from medretrieve.wire import DEFAULT_DEADLINE_MS, FILTER_OPTIONS

from .doors import Outcome, Request, ThroughAsyncClient, ThroughCli, ThroughClient, ThroughPage, asked, same
from .drawing import INVALID_VALUES, VALID_VALUES

ANSWER_DEADLINE_MS = 120_000  # the whole answer's deadline, sent by every door (retrieval keeps its own, 300 ms)
ANSWER_EXAMPLES = 12  # drawn requests per answer door (an extractive answer costs a search and sentence scoring)


@dataclass
class Answered:
    """What an answer door answered: its ``evidence`` ((chunk id, score) in order), ``text``, ``abstained`` and the
    source numbers each citation names (``cited``); or a refusal, as :class:`~.doors.Outcome` holds one."""

    evidence: List[Tuple[str, float]] = field(default_factory=list)
    text: str = ""
    abstained: bool = False
    cited: List[List[int]] = field(default_factory=list)
    refusal: Optional[Outcome] = None

    @classmethod
    def of(cls, ans: Answer) -> "Answered":
        return cls([(h.chunk_id, h.score) for h in ans.evidence], ans.text, ans.abstained,
                   [list(c.sources) for c in ans.citations])

    @classmethod
    def refused(cls, outcome: Outcome) -> "Answered":
        return cls(refusal=outcome)


def same_answer(reference: Answered, other: Answered, door: str) -> None:
    """Assert that ``other`` (answered by ``door``) is ``reference``: refusals and evidence as :func:`~.doors.same`
    compares a search's, then the same text, abstention and citations."""
    if reference.refusal or other.refusal:
        same(reference.refusal or Outcome(), other.refusal or Outcome(), door, InProcessAnswers.name)
        return
    same(Outcome(reference.evidence), Outcome(other.evidence), door, InProcessAnswers.name)
    assert (other.text, other.abstained) == (reference.text, reference.abstained), f"{door}: another answer"
    assert other.cited == reference.cited, f"{door}: other citations"


def _options(request: Request) -> Dict[str, Any]:
    return {"deadline_ms": ANSWER_DEADLINE_MS, **request.options}


class InProcessAnswers:
    """``Answerer.answer`` over the reference's retriever, extractive, retrieving within the server's search
    deadline."""

    name = "Answerer.answer"

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever

    def answer(self, request: Request) -> Answered:
        from medretrieve.generation.generate import Answerer

        options = _options(request)
        answerer = Answerer(self.retriever, None, k=options.pop("k", 10), retrieve_deadline_ms=DEFAULT_DEADLINE_MS)
        try:
            return Answered.of(answerer.answer(request.question, **options))
        except (TypeError, ValueError) as exc:
            return Answered.refused(Outcome.refusal(exc))


class ClientAnswers:
    """``Client.answer`` or ``AsyncClient.answer`` (awaited on the door's loop), through a
    :class:`~.doors.ThroughClient`'s or :class:`~.doors.ThroughAsyncClient`'s client."""

    def __init__(self, door: Union[ThroughClient, ThroughAsyncClient]) -> None:
        self.name = f"{door.name}.answer"
        self.door = door

    def answer(self, request: Request) -> Answered:
        def call() -> Answered:
            reply = self.door.client.answer(request.question, **_options(request))
            loop = getattr(self.door, "loop", None)
            return Answered.of(loop.run_until_complete(reply) if loop is not None else reply)

        return asked(call, Answered.refused)


class HttpAnswers:
    """``POST /v1/answer`` with the request as its JSON body (over a :class:`~.doors.ThroughPage`'s connection)."""

    def __init__(self, door: ThroughPage) -> None:
        self.name = "POST /v1/answer"
        self.door = door

    def answer(self, request: Request) -> Answered:
        body = json.dumps({"question": request.question, **_options(request)}, allow_nan=False).encode()
        reply = self.door.http.post("/v1/answer", content=body, headers={"content-type": "application/json"})
        if reply.status_code == 422:
            return Answered.refused(ThroughPage.refusal(reply.json()))
        assert reply.status_code == 200, f"POST /v1/answer answered {reply.status_code}: {reply.text[:500]}"
        return Answered.of(Answer.from_dict(reply.json()))


class CliAnswers:
    """``medretrieve answer COLLECTION QUESTION --k K --deadline-ms D [filter flags] --json`` in a subprocess."""

    name = "medretrieve answer --json"

    def __init__(self, cli: ThroughCli) -> None:
        self.cli = cli

    def answer(self, request: Request) -> Answered:
        options = _options(request)
        flags = ThroughCli.flags(Request(request.question, options))
        assert flags is not None, f"a command line cannot write {request}"
        done = self.cli.run(["answer", *flags, "--json"], request.question)
        if done.returncode == 2:
            return Answered.refused(ThroughCli.usage_refusal(done.stderr))
        assert done.returncode == 0, f"medretrieve answer exited {done.returncode}: {done.stderr[-2000:]}"
        return Answered.of(Answer.from_dict(json.loads(done.stdout)))


def answer_requests(questions: List[str]) -> Any:
    """Answer requests: a question, maybe ``k`` (1-10: each hit's sentences are scored), and any of the filter
    options, valid or (one at most) invalid."""
    names = st.lists(st.sampled_from(FILTER_OPTIONS), max_size=3, unique=True)

    @st.composite
    def draw(draw: Any) -> Request:
        options = {name: draw(VALID_VALUES[name]) for name in draw(names)}
        if draw(st.booleans()):
            options["k"] = draw(st.integers(1, 10))
        if draw(st.sampled_from([False, False, True])):
            faulty = draw(st.sampled_from(FILTER_OPTIONS))
            options[faulty] = draw(INVALID_VALUES[faulty])
        return Request(draw(st.sampled_from(questions)), options)

    return draw()


def compared_answers(reference: Any, door: Any, request: Request, tries: int = 3) -> None:
    """Ask both doors and compare; a pair that differs is asked again (a retrieval stage cut by its deadline at one
    door only), up to ``tries`` times in all."""
    for attempt in range(tries):
        want, got = reference.answer(request), door.answer(request)
        try:
            same_answer(want, got, door.name)
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


def check_answer_door(reference: Any, door: Any, questions: List[str], examples: int = ANSWER_EXAMPLES) -> None:
    """Ask ``door`` and ``reference`` the drawn answer requests that JSON can write and compare each pair."""

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(answer_requests(questions).filter(lambda req: ThroughPage.body(req) is not None))
    def check(req: Request) -> None:
        note(repr(req))
        compared_answers(reference, door, req)

    check()

