"""The Ray Serve deployment of sharded search serves the HTTP API of ``medretrieve serve``: the same endpoints, the
same OpenAPI document, the same strict request checks and error bodies, ``Server-Timing``; its HTTP answers are
the replica's ShardedRetriever's, and so are its handle calls (refused as the retriever refuses)."""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("ray")
pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from sharded_data import QUESTIONS, encoder_dir, ray_cluster, sharded_corpus  # noqa: E402,F401

from medretrieve.retrieval.results import SearchResult  # noqa: E402

LONG_MS = 120_000.0  # a deadline no stage meets on a loaded 2-core box, so HTTP and the handle run the same stages


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stages(result: SearchResult):
    return [(s.name, s.ran, s.cut) for s in result.stages]


def test_serve_deployment_serves_the_http_api_over_shards(ray_cluster, sharded_corpus):
    from ray import serve

    from medretrieve.corpus.collection import Collection
    from medretrieve.distributed.serve import app
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.server.app import create_app

    dirs, one, _ = sharded_corpus
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        handle = serve.run(app(dirs, retriever_options={"warmup": False}, server_options={"deadline_ms": LONG_MS}),
                           name="sharded", route_prefix="/")
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=120) as http:
            assert http.get("/readyz").json()["status"] == "ready"
            described = http.get("/v1/collection").json()
            assert (described["chunks"], described["documents"]) == (120, 60) and "directory" not in described
            # one API document for both servers
            local = create_app(Retriever(Collection.open(one), warmup=False))
            assert http.get("/openapi.json").json() == local.openapi()

            for body in ({"question": QUESTIONS[0], "k": 5}, {"question": QUESTIONS[1], "k": 3, "sections": ["treatment"],
                                                              "per_document": 1, "explain": True}):
                r = http.post("/v1/search", json=body)
                assert r.status_code == 200, r.text
                assert {"queue", "work", "total"} <= {part.split(";")[0].strip()
                                                      for part in r.headers["server-timing"].split(",")}
                got = SearchResult.from_dict(r.json())
                options = {key: value for key, value in body.items() if key not in ("question", "explain")}
                want = SearchResult.from_dict(handle.search.remote(body["question"], deadline_ms=LONG_MS,
                                                                   **options).result())
                assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in want.hits]
                assert [h.score for h in got.hits] == pytest.approx([h.score for h in want.hits], rel=1e-6)
                assert _stages(got) == _stages(want) and got.shards["answered"] == ["shard0", "shard1"]
            batch = http.post("/v1/search:batch", json={"questions": QUESTIONS[:2], "k": 2})
            assert batch.status_code == 200 and len(batch.json()["results"]) == 2

            # refusals as medretrieve serve gives them: 422 naming the field, 400 for a body that is not JSON
            for body, field in (({"question": QUESTIONS[0], "colour": "red"}, "colour"), ({"k": 3}, "question"),
                                ({"question": QUESTIONS[0], "k": "5"}, "k")):
                bad = http.post("/v1/search", json=body)
                assert bad.status_code == 422, bad.text
                assert bad.json()["error"]["type"] == "invalid_request" and bad.json()["error"]["field"] == field
            broken = http.post("/v1/search", content=b"{", headers={"content-type": "application/json"})
            assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_json"

        # the handle searches as ShardedRetriever.search does, and refuses as it does
        got = SearchResult.from_dict(handle.search.remote(QUESTIONS[0], k=5, deadline_ms=None).result())
        assert len(got.hits) == 5 and got.shards["answered"] == ["shard0", "shard1"]
        with pytest.raises(TypeError, match="colour"):
            handle.search.remote(QUESTIONS[0], colour="red").result()
        with pytest.raises(ValueError, match="k"):
            handle.search.remote(QUESTIONS[0], k=0).result()
    finally:
        serve.shutdown()


def test_serve_app_checks_server_options_before_deploying(tmp_path):
    from medretrieve.distributed.serve import app

    with pytest.raises(ValueError, match="reload"):
        app([tmp_path], server_options={"enable_reload": True})
    with pytest.raises(ValueError, match="max_inflight"):
        app([tmp_path], server_options={"max_inflight": 0})
    with pytest.raises(TypeError, match="colour"):
        app([tmp_path], server_options={"colour": "red"})


def test_a_refused_option_crosses_a_process_boundary_whole():
    """Ray hands a replica's error back pickled: wire's refusals keep their type and option (they came back as
    Ray's UnserializableException)."""
    import pickle

    from medretrieve.wire import SearchOptionTypeError, SearchOptionValueError

    for error in (SearchOptionTypeError("k must be an integer, got '5'", "k"),
                  SearchOptionValueError("k must be in [1, 100] hits, got 0", "k")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and back.option == "k"
