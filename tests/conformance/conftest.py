"""The conformance suite of issue 42: every door to the engine, asked the same request, answers the same search.

One small collection is built once (the demo corpus, ``demo_collection_dir``); hypothesis draws requests (questions
from the demo questions and, when the public data is present, a BioASQ golden file; every option of
:data:`medretrieve.wire.SEARCH_OPTIONS`, with valid and invalid values) and each door must answer what
``Retriever.search`` answers: the same hit ids in the same order, the same scores (to float tolerance) and the same
stage log (names and whether each ran; not timings), or the same typed refusal naming the same option.

Adding a door (MCP, a framework retriever, Ray Serve, ...): write one adapter with a ``name`` and
``search(request: doors.Request) -> doors.Outcome`` (the :class:`doors.Door` protocol; a refusal is an Outcome, not
an exception), and a session fixture that yields it; then add the fixture's name to ``DOORS`` in
``test_doors.py``. ``doors.same`` is the comparison every pair goes through. See README.md.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest

from . import doors

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data"))
BIOASQ_QUESTIONS = 40  # questions taken from the first BioASQ golden file (bodies only: the collection is the demo's)


@pytest.fixture(scope="session")
def conformance_questions() -> List[str]:
    """The demo questions, and BioASQ golden questions when the public data is there (the root conftest's
    ``$MEDRETRIEVE_SHARED_DATA``, default ``../shared/data``)."""
    demo = json.loads((ROOT / "examples" / "demo_questions.json").read_text())["questions"]
    return [q["body"] for q in demo] + bioasq_questions(SHARED_DATA if SHARED_DATA.is_dir() else None)


def bioasq_questions(data: Optional[Path]) -> List[str]:
    files = sorted((data / "bioasq").glob("*_golden.json")) if data is not None else []
    if not files:
        return []
    golden = json.loads(files[0].read_text(encoding="utf-8"))["questions"]
    return [q["body"] for q in golden[:BIOASQ_QUESTIONS]]


@pytest.fixture(scope="session")
def in_process(demo_collection_dir):
    """The reference door: ``Retriever.search`` over the collection the server serves, opened as the server opens
    it (one encoder thread, so the query vectors are computed alike)."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever

    return doors.InProcess(Retriever(Collection.open(demo_collection_dir, encoder_threads=1)))


@pytest.fixture(scope="session")
def conformance_server(demo_collection_dir) -> Iterator[str]:
    """A real ``medretrieve serve`` on 127.0.0.1 over the collection; its URL."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from medretrieve.testing.server import ServerProcess

    with ServerProcess(demo_collection_dir) as server:
        yield server.url


def _opened(door: Any) -> Iterator[Any]:
    """``door`` for the session, closed at its end (its connections, its event loop)."""
    try:
        yield door
    finally:
        door.close()


@pytest.fixture(scope="session")
def client_door(conformance_server):
    yield from _opened(doors.ThroughClient(conformance_server))


@pytest.fixture(scope="session")
def async_client_door(conformance_server):
    yield from _opened(doors.ThroughAsyncClient(conformance_server))


@pytest.fixture(scope="session")
def page_door(conformance_server):
    yield from _opened(doors.ThroughPage(conformance_server))


@pytest.fixture(scope="session")
def cli_door(demo_collection_dir):
    return doors.ThroughCli(str(demo_collection_dir))
