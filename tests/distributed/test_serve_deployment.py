"""The Ray Serve deployment of sharded search: a handle call and an HTTP request give the ShardedRetriever's
result; a bad request is a 400 with a JSON error."""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from sharded_data import QUESTIONS, encoder_dir, ray_cluster, sharded_corpus  # noqa: E402,F401

from medretrieve.retrieval.results import SearchResult  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_deployment_answers_handle_calls_and_http(ray_cluster, sharded_corpus):
    from ray import serve

    from medretrieve.distributed import ShardedRetriever
    from medretrieve.distributed.serve import app

    dirs, _, _ = sharded_corpus
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        handle = serve.run(app(dirs, retriever_options={"warmup": False}), name="sharded", route_prefix="/search")
        got = SearchResult.from_dict(handle.search.remote(QUESTIONS[0], k=5, deadline_ms=None).result())
        local = ShardedRetriever(dirs)
        try:
            want = local.search(QUESTIONS[0], k=5, deadline_ms=None)
        finally:
            local.close()
        assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in want.hits]
        assert got.shards["answered"] == ["shard0", "shard1"]
        url = f"http://127.0.0.1:{port}/search"
        r = httpx.post(url, json={"question": QUESTIONS[0], "k": 5, "deadline_ms": None}, timeout=120)
        assert r.status_code == 200 and [h["chunk_id"] for h in r.json()["hits"]] == [h.chunk_id for h in want.hits]
        bad = httpx.post(url, json={"question": QUESTIONS[0], "colour": "red"}, timeout=120)
        assert bad.status_code == 400 and "colour" in bad.json()["error"]
        assert httpx.post(url, json={"k": 3}, timeout=120).status_code == 400
    finally:
        serve.shutdown()
