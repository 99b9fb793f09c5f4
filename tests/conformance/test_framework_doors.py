"""The framework doors answer a request as ``Retriever.search`` does: the LangChain, LlamaIndex and Haystack
retrievers, each over a collection folder and over a server URL (a real ``medretrieve serve``), give the same hits
in the same order with the same scores, or the same typed refusal naming the same option.

A framework's documents carry no stage log, so these doors are compared on hits, scores and refusals. Each door is
asked the way its framework takes options: LangChain per call (``invoke(question, **options)``), LlamaIndex through
the retriever's attributes (changed between queries), Haystack at construction (a component per request). A
request without a deadline gets a long one at both doors: a framework result does not say which stages the deadline
cut, so a search that depends on the machine's load cannot be told apart."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from .doors import Outcome, Request, same
from .drawing import check_door

EXAMPLES = 15  # drawn requests per framework door (Haystack opens a folder for each: ~0.7 s)
LONG_MS = 60_000.0
QUESTION = "Which drugs lower serum urate in gout?"

Hits = List[Tuple[str, float]]


class ThroughFramework:
    """A framework retriever as a door: ``ask(source, question, options) -> hits`` runs one search the framework's
    way; a refusal (raised at construction or at the query) becomes the Outcome of its exception."""

    def __init__(self, name: str, source: str, ask: Callable[[str, Any, Dict[str, Any]], Hits]) -> None:
        self.name = name
        self.source = source
        self.ask = ask

    def search(self, request: Request) -> Outcome:
        try:
            return Outcome(hits=self.ask(self.source, request.question, dict(request.options)))
        except (TypeError, ValueError) as exc:
            return Outcome.refusal(exc)


class RetrieverPerSource:
    """One framework retriever per source (a folder opens its collection once), made by :meth:`open`."""

    def __init__(self) -> None:
        self.retrievers: Dict[str, Any] = {}

    def __call__(self, source: str, question: Any, options: Dict[str, Any]) -> Hits:
        if source not in self.retrievers:
            self.retrievers[source] = self.open(source)
        return self.ask(self.retrievers[source], question, options)

    def open(self, source: str) -> Any:
        raise NotImplementedError

    def ask(self, retriever: Any, question: Any, options: Dict[str, Any]) -> Hits:
        raise NotImplementedError

    def close(self) -> None:
        for retriever in self.retrievers.values():
            retriever.close()


class LangChainAsk(RetrieverPerSource):
    """LangChain: the options per call."""

    def open(self, source: str) -> Any:
        from medretrieve.integrations.langchain import LangChainRetriever

        return LangChainRetriever(source=source)

    def ask(self, retriever: Any, question: Any, options: Dict[str, Any]) -> Hits:
        return [(d.metadata["chunk_id"], d.metadata["score"]) for d in retriever.invoke(question, **options)]


class LlamaIndexAsk(RetrieverPerSource):
    """LlamaIndex: the options set as the retriever's attributes before each query."""

    def open(self, source: str) -> Any:
        from medretrieve.integrations.llamaindex import LlamaIndexRetriever

        return LlamaIndexRetriever(source)

    def ask(self, retriever: Any, question: Any, options: Dict[str, Any]) -> Hits:
        retriever.k = options.pop("k", None)
        retriever.deadline_ms = options.pop("deadline_ms", None)
        retriever.sections = options.pop("sections", None)
        retriever.options = options
        return [(n.node.node_id, n.score) for n in retriever.retrieve(question)]


def haystack_ask(source: str, question: Any, options: Dict[str, Any]) -> Hits:
    """A HaystackRetriever built with the request's options (where a component takes them), run once."""
    from medretrieve.integrations.haystack import HaystackRetriever

    component = HaystackRetriever(source, **options)
    try:
        return [(d.id, d.score) for d in component.run(question)["documents"]]
    finally:
        component.close()


@pytest.fixture(scope="module", params=["langchain", "llamaindex", "haystack"])
def framework(request) -> Iterator[Tuple[str, Any]]:
    pytest.importorskip({"langchain": "langchain_core", "llamaindex": "llama_index.core",
                         "haystack": "haystack"}[request.param])
    ask: Any = {"langchain": LangChainAsk, "llamaindex": LlamaIndexAsk}.get(request.param, lambda: haystack_ask)()
    yield request.param, ask
    close = getattr(ask, "close", None)
    if close is not None:
        close()


@pytest.fixture(params=["folder", "url"])
def framework_door(request, framework, demo_collection_dir) -> ThroughFramework:
    name, ask = framework
    source = str(demo_collection_dir) if request.param == "folder" else request.getfixturevalue("conformance_server")
    return ThroughFramework(f"{name} over a {request.param}", source, ask)


def _compare(in_process: Any, door: ThroughFramework, req: Request) -> None:
    if "deadline_ms" not in req.options:
        req = replace(req, options={**req.options, "deadline_ms": LONG_MS})
    want = in_process.search(req)
    same(replace(want, stages=[]) if not want.refused else want, door.search(req), door.name)


def test_every_framework_door_answers_as_retriever_search(framework_door, in_process, conformance_questions):
    # a framework's query is a string by its own API: no caller can ask it anything else
    check_door(in_process, framework_door, conformance_questions, sendable=lambda req: isinstance(req.question, str),
               compare=_compare, examples=EXAMPLES, at_least=0, fixtures_per_test=True)


@pytest.mark.parametrize("options", [{}, {"k": 3, "mmr": True, "per_document": 1}, {"sections": ["treatment"]},
                                     {"k": "5"}, {"k": True}, {"deadline_ms": "300"}, {"section": ["diagnosis"]},
                                     {"lexical": False}, {"dense": False, "bm25": False}])
def test_the_framework_doors_answer_the_issues_requests(framework_door, in_process, options):
    """The requests issue 42 names: coerced (``k="5"``, ``k=True``, ``deadline_ms="300"``) or dropped
    (``section``, the old stage name ``lexical``) at these doors before."""
    _compare(in_process, framework_door, Request(QUESTION, options))


def test_a_drifted_framework_door_fails_the_comparison(in_process, demo_collection_dir, monkeypatch):
    """A framework door with a default of its own (LangChain asking 3 hits where none were asked) is caught."""
    pytest.importorskip("langchain_core")
    from medretrieve.integrations import source as source_module

    honest = source_module.SearchCall.of.__func__

    def drifted(cls, deadline_ms=None, **options):
        return honest(cls, deadline_ms, **{"k": 3, **options})

    monkeypatch.setattr(source_module.SearchCall, "of", classmethod(drifted))
    ask = LangChainAsk()
    try:
        with pytest.raises(AssertionError, match="other hits"):
            _compare(in_process, ThroughFramework("langchain", str(demo_collection_dir), ask), Request(QUESTION))
    finally:
        ask.close()
