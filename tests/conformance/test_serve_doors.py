"""The Ray Serve doors answer a request as ``Retriever.search`` does, on a local Ray cluster: the deployment of
``medretrieve.distributed.serve`` over two shards of the demo corpus, asked through its HTTP API (``POST
/v1/search``, as the page and any HTTP caller send it) and through its handle, gives what ``ShardedRetriever.search``
over the same shards gives in process (a ``ShardedRetriever`` is a ``Retriever``): the same hits, scores and stage
log, or the same refusal naming the same option. Filters are drawn for it as for every door (each shard filters
its own rows), and ``POST /v1/facets`` counts as the reference does.

The deployment and the in-process reference share one set of shard actors (``share_shards``), so that two Ray
actors, not four, hold the shards on a 2-core machine. Runs in ``.ci/run`` (the distributed extra is installed
there); its time is bounded by few examples and a timeout on every call."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest
from ray_start import start_local_ray

from .doors import InProcess, Outcome, Request, ThroughPage
from .drawing import check_door, compared_or_fail

pytest.importorskip("ray")
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

EXAMPLES = 15  # drawn requests per Serve door (each a fan-out to the shards at both doors)
TIMEOUT_S = 120.0
SHARDS = 2


class ThroughServeHandle:
    """The deployment's handle: ``handle.search.remote(question, **options)``, the result as a dict."""

    name = "Ray Serve handle"

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def search(self, request: Request) -> Outcome:
        from medretrieve.records import SearchResult

        try:
            reply = self.handle.search.remote(request.question, **request.options).result(timeout_s=TIMEOUT_S)
        except (TypeError, ValueError) as exc:  # Ray re-raises the replica's error as an instance of its type
            return Outcome.refusal(exc)
        return Outcome.of(SearchResult.from_dict(reply))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory) -> List[Path]:
    """The demo corpus split into two shards (``shard_of``), each an ordinary collection."""
    from medretrieve.cli.demo import DEMO_CORPUS
    from medretrieve.corpus.collection import Collection
    from medretrieve.distributed.layout import shard_of

    records = [json.loads(line) for line in Path(DEMO_CORPUS).read_text(encoding="utf-8").splitlines() if line]
    work = tmp_path_factory.mktemp("demo-shards")
    dirs = []
    for s in range(SHARDS):
        Collection.build([r for r in records if shard_of(r["id"], SHARDS) == s], work / f"shard{s}",
                         encoder="default", progress=False)
        dirs.append(work / f"shard{s}")
    return dirs


@pytest.fixture(scope="module")
def serve_doors(demo_shards) -> Iterator[Tuple[InProcess, ThroughPage, ThroughServeHandle]]:
    """(the reference over the shards in process, the deployment's HTTP API, its handle) on a local Ray cluster
    (started here unless one runs; Serve shut down at the end)."""
    import ray
    from ray import serve

    from medretrieve.distributed import ShardedRetriever
    from medretrieve.distributed.serve import app, stop_shared_shards

    started = not ray.is_initialized()
    if started:
        start_local_ray(ray)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    reference = None
    try:
        handle = serve.run(app(demo_shards, share_shards=True, retriever_options={"warmup": False}),
                           name="conformance", route_prefix="/")
        reference = ShardedRetriever(demo_shards, shared=True, warmup=False)
        http = ThroughPage(f"http://127.0.0.1:{port}")
        http.name = "Ray Serve POST /v1/search"
        yield InProcess(reference), http, ThroughServeHandle(handle)
        http.close()
    finally:
        serve.shutdown()
        if reference is not None:
            reference.close()
        stop_shared_shards(demo_shards)
        if started:
            ray.shutdown()


@pytest.mark.parametrize("which", [1, 2], ids=["http", "handle"])
def test_every_serve_door_answers_as_sharded_search(serve_doors, which, conformance_questions):
    reference, door = serve_doors[0], serve_doors[which]
    # JSON cannot write a NaN: no HTTP caller can send it
    check_door(reference, door, conformance_questions,
               sendable=lambda req: not isinstance(door, ThroughPage) or door.body(req) is not None,
               examples=EXAMPLES, at_least=0)


@pytest.mark.parametrize("options", [{}, {"k": "5"}, {"colour": "red"}, {"lexical": False},
                                     {"sections": ["treatment"], "mmr": True, "per_document": 1},
                                     {"where": "topic == cardiology", "k": 3},
                                     {"where": {"field": "topic", "op": "in", "value": ["endocrinology"]},
                                      "include_retracted": True, "evidence_prior": True, "mmr": True},
                                     {"where": "not topic in (cardiology)", "recency_half_life": 5, "recovery": True},
                                     {"where": "yeer > 1"}, {"where": "topic > cardiology"}])
def test_the_serve_doors_answer_the_issues_requests(serve_doors, options):
    """Ray Serve was a second HTTP API (flat switches, its own validation and error shape, no sections)."""
    reference, http, handle = serve_doors
    for door in (http, handle):
        compared_or_fail(reference, door, Request("Which drugs lower serum urate in gout?",
                                                   {"deadline_ms": 60_000, **options}))


def test_the_serve_facets_count_as_sharded_search(serve_doors):
    """``POST /v1/facets`` of the deployment: the shards' counts summed, as ``ShardedRetriever.facets`` gives
    them; an unknown field refused 422 naming it."""
    reference, http, _ = serve_doors
    described = http.http.get("/v1/collection", timeout=TIMEOUT_S).json()
    assert described["metadata"] == {"topic": "keyword"}  # what the page offers filters and facets by
    for body in ({"fields": ["topic"]}, {"fields": ["topic"], "where": "not topic == cardiology", "top": 2}):
        r = http.http.post("/v1/facets", json=body, timeout=TIMEOUT_S)
        assert r.status_code == 200, r.text
        want = reference.retriever.facets(**body)
        assert r.json()["documents"] == want["documents"] > 0
        assert [(p["value"], p["count"]) for p in r.json()["facets"]["topic"]] == [
            tuple(p) for p in want["facets"]["topic"]]
    bad = http.http.post("/v1/facets", json={"fields": ["colour"]}, timeout=TIMEOUT_S)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "fields"
    handle = serve_doors[2].handle
    assert handle.facets.remote(["topic"], top=3).result(timeout_s=TIMEOUT_S) == reference.retriever.facets(
        ["topic"], top=3)
    with pytest.raises(ValueError, match="colour"):
        handle.facets.remote(["topic"], where="colour == red").result(timeout_s=TIMEOUT_S)
