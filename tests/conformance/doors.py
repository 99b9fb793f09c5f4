"""The doors of the conformance suite: one adapter per way into the engine, each turning a :class:`Request` into an
:class:`Outcome` (the hits and the stage log, or a typed refusal), so that any two doors can be compared.

A door is anything with a ``name`` and ``search(request) -> Outcome`` (:class:`Door`). The reference is
:class:`InProcess` (``Retriever.search``); the others here reach the same collection through a real
``medretrieve serve`` (:class:`ThroughClient`, :class:`ThroughAsyncClient`) or the CLI (:class:`ThroughCli`).
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, TypeVar

from medretrieve.records import SearchResult
from medretrieve.wire import SEARCH_OPTIONS, STAGE_SWITCHES

SCORE_TOLERANCE = 1e-6  # relative: scores travel as JSON floats (exact with orjson; a margin for other encoders)


@dataclass(frozen=True)
class Request:
    """One search request as a caller writes it: the question and the options it names (Python values, possibly
    of the wrong type or out of bounds: a door must then refuse it)."""

    question: Any
    options: Dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints failing examples with it
        return f"Request({self.question!r}, {self.options!r})"


@dataclass
class Outcome:
    """What a door answered: ``hits`` ((chunk id, score) in order) and ``stages`` ((name, ran) in order), or a
    refusal: ``refused`` (``type``: a wrong type or an unknown option; ``value``: a value out of bounds; ``usage``:
    a CLI usage error, which cannot tell the two apart) and the ``option`` it names. ``cut``: stages the deadline
    cut (a result that depends on the machine's load, so not compared)."""

    hits: List[Tuple[str, float]] = field(default_factory=list)
    stages: List[Tuple[str, bool]] = field(default_factory=list)
    refused: Optional[str] = None
    option: Optional[str] = None
    cut: List[str] = field(default_factory=list)

    @classmethod
    def of(cls, result: SearchResult) -> "Outcome":
        return cls([(h.chunk_id, h.score) for h in result.hits], [(s.name, s.ran) for s in result.stages],
                   cut=result.cut)

    @classmethod
    def refusal(cls, exc: BaseException) -> "Outcome":
        """The refusal of a Python door: the exception's family and the option it names (``option`` of
        medretrieve's own errors, ``field`` of the client's; its last dotted part)."""
        named = getattr(exc, "option", None) or getattr(exc, "field", None)
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(exc))  # Python's own, for a misspelt name
        if named is None and isinstance(exc, TypeError) and unexpected:
            named = unexpected.group(1)
        return cls(refused="type" if isinstance(exc, TypeError) else "value",
                   option=None if named is None else str(named).split(".")[-1])


class Door(Protocol):
    """A way into the engine that the suite compares with ``Retriever.search``."""

    name: str

    def search(self, request: Request) -> Outcome:
        """The outcome of ``request`` at this door; a refusal is an Outcome, never an exception."""


COARSE_REFUSALS = ("usage", "http")  # a CLI usage error, an HTTP 4xx: refused, naming the option, of no Python type


def same(reference: Outcome, other: Outcome, door: str, reference_door: str = "Retriever.search") -> None:
    """Assert that ``other`` (answered by ``door``) is ``reference``: the same hits in the same order with the same
    scores (to :data:`SCORE_TOLERANCE`) and the same stage log, or the same refusal naming the same option (of the
    same Python type, where the door has one)."""
    if reference.refused or other.refused:
        kinds_agree = other.refused == reference.refused or (
            other.refused in COARSE_REFUSALS and reference.refused is not None)
        assert kinds_agree and other.option == reference.option, \
            f"{door} answered {other} where {reference_door} answered {reference}"
        return
    assert [c for c, _ in other.hits] == [c for c, _ in reference.hits], f"{door}: other hits or another order"
    for (chunk, want), (_, got) in zip(reference.hits, other.hits):
        assert math.isclose(got, want, rel_tol=SCORE_TOLERANCE, abs_tol=1e-9), f"{door}: {chunk} scored {got}"
    assert other.stages == reference.stages, f"{door}: another stage log"


class InProcess:
    """``Retriever.search``: the reference every other door is compared with."""

    name = "Retriever.search"

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever

    def search(self, request: Request) -> Outcome:
        try:
            return Outcome.of(self.retriever.search(request.question, **request.options))
        except (TypeError, ValueError) as exc:
            return Outcome.refusal(exc)


T = TypeVar("T")


def _refusal_or_raise(exc: BaseException) -> Outcome:
    """A client's refusal of the request (before sending, or the server's 4xx) as an Outcome; anything else (the
    server down, a 5xx) is a failure of the test, raised."""
    from medretrieve.client import InvalidRequest

    if isinstance(exc, (TypeError, InvalidRequest)) or (isinstance(exc, ValueError) and hasattr(exc, "option")):
        return Outcome.refusal(exc)
    raise exc


def asked(call: Callable[[], T], refused: Callable[[Outcome], T]) -> T:
    """``call()`` (a client's request), or ``refused`` of the client's refusal (:func:`_refusal_or_raise`)."""
    try:
        return call()
    except Exception as exc:
        return refused(_refusal_or_raise(exc))


def _as_is(outcome: Outcome) -> Outcome:
    return outcome


class ThroughClient:
    """``medretrieve.client.Client`` against a real ``medretrieve serve``."""

    name = "Client"

    def __init__(self, url: str) -> None:
        from medretrieve.client import Client

        self.client = Client(url)

    def search(self, request: Request) -> Outcome:
        return asked(lambda: Outcome.of(self.client.search(request.question, **request.options)), _as_is)

    def close(self) -> None:
        self.client.close()


class ThroughAsyncClient:
    """``medretrieve.client.AsyncClient`` against a real ``medretrieve serve``, on an event loop of its own (where
    its connections live)."""

    name = "AsyncClient"

    def __init__(self, url: str) -> None:
        from medretrieve.client import AsyncClient

        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient(url)

    def search(self, request: Request) -> Outcome:
        return asked(
            lambda: Outcome.of(self.loop.run_until_complete(self.client.search(request.question, **request.options))),
            _as_is)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


class ThroughPage:
    """``POST /v1/search`` as the search page (and any HTTP caller) sends it: the request as a JSON body, stage
    switches under ``stages``, with the page's ``explain`` (its stage table shows the response's stage log). A
    request that JSON cannot write (NaN) is not asked here (:meth:`body` returns None)."""

    name = "POST /v1/search"

    def __init__(self, url: str) -> None:
        import httpx

        self.http = httpx.Client(base_url=url, timeout=60.0)

    @staticmethod
    def body(request: Request) -> Optional[bytes]:
        out: Dict[str, Any] = {"question": request.question, "explain": True}
        for name, value in request.options.items():
            if name in STAGE_SWITCHES:
                out.setdefault("stages", {})[name] = value
            else:
                out[name] = value
        try:
            return json.dumps(out, allow_nan=False).encode()
        except (TypeError, ValueError):
            return None

    def search(self, request: Request) -> Outcome:
        body = self.body(request)
        assert body is not None, f"JSON cannot write {request}"
        reply = self.http.post("/v1/search", content=body, headers={"content-type": "application/json"})
        if reply.status_code == 422:
            return self.refusal(reply.json())
        assert reply.status_code == 200, f"POST /v1/search answered {reply.status_code}: {reply.text[:500]}"
        return Outcome.of(SearchResult.from_dict(reply.json()))

    @staticmethod
    def refusal(error: Dict[str, Any]) -> Outcome:
        """The refusal a 422's documented JSON error names (its ``field``: a stage switch's is stages.NAME; the
        rule over dense and bm25 is stages; an item's is NAME.INDEX)."""
        named = error["error"]["field"]
        if named is None:
            return Outcome(refused="http")
        parts = named.split(".")
        return Outcome(refused="http", option=parts[0] if parts[-1].isdigit() else parts[-1])

    def close(self) -> None:
        self.http.close()


class ThroughCli:
    """``medretrieve search COLLECTION QUESTION [flags] --json`` in a subprocess (seconds each: a few examples).
    A command line holds text only, so a request whose values a command line cannot write (a string where a number
    goes, a bool for a number) is not asked here (:meth:`argv` returns None)."""

    name = "medretrieve search --json"

    def __init__(self, collection: str, timeout_s: float = 300.0) -> None:
        self.collection = collection
        self.timeout_s = timeout_s

    @staticmethod
    def argv(request: Request) -> Optional[List[str]]:
        """The command line of ``request`` (flags as ``add_search_options`` builds them from the declaration), or
        None when a command line cannot write it."""
        flags = ThroughCli.flags(request)
        return None if flags is None else [sys.executable, "-m", "medretrieve", "search", *flags, "--json"]

    @staticmethod
    def flags(request: Request) -> Optional[List[str]]:
        """The flags of ``request``'s options (None when a command line cannot write them or its question)."""
        if not isinstance(request.question, str) or request.question.startswith("-"):
            return None
        out: List[str] = []
        for name, value in request.options.items():
            flag = "--" + name.replace("_", "-")
            option = SEARCH_OPTIONS.get(name)
            if option is None or value is None:
                return None
            if option.stage or option.type == "boolean":
                if not isinstance(value, bool):
                    return None
                out.append(flag if value else f"--no-{name}")
            elif option.type == "array":
                if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
                    return None
                out += [flag, *value]
            elif option.type == "filter":  # its text form only (a JSON object is no flag's value)
                if not isinstance(value, str) or value.startswith("-"):
                    return None
                out += [flag, value]
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return None
            else:
                out += [flag, repr(value)]
        return out

    def run(self, args: List[str], question: str) -> "subprocess.CompletedProcess[str]":
        """``python -m medretrieve ARGS COLLECTION QUESTION``, its output captured."""
        return subprocess.run([sys.executable, "-m", "medretrieve", *args, self.collection, question],
                              capture_output=True, text=True, timeout=self.timeout_s)

    @staticmethod
    def usage_refusal(stderr: str) -> Outcome:
        return Outcome(refused="usage", option=_named(stderr))

    def search(self, request: Request) -> Outcome:
        flags = self.flags(request)
        assert flags is not None, f"a command line cannot write {request}"
        done = self.run(["search", *flags, "--json"], request.question)
        if done.returncode == 2:
            return self.usage_refusal(done.stderr)
        assert done.returncode == 0, f"medretrieve search exited {done.returncode}: {done.stderr[-2000:]}"
        return Outcome.of(SearchResult.from_dict(json.loads(done.stdout)))


def _named(stderr: str) -> Optional[str]:
    """The option a CLI usage error names: argparse's ``argument --flag``, else the first option its message
    names (``stages`` for the rule over dense and bm25)."""
    flag = re.search(r"argument --([a-z0-9-]+)", stderr)
    if flag:
        return flag.group(1).replace("-", "_")
    if "dense and bm25" in stderr:
        return "stages"
    return next((name for name in ("question", *SEARCH_OPTIONS) if re.search(rf"\b{name}\b", stderr)), None)


def requestable_by_cli(requests: Sequence[Request]) -> List[Request]:
    return [r for r in requests if ThroughCli.argv(r) is not None]


__all__ = ["Request", "Outcome", "Door", "same", "InProcess", "ThroughClient", "ThroughAsyncClient", "ThroughPage",
           "ThroughCli", "requestable_by_cli"]
