"""create_app in-process (no sockets): mounted inside a user's FastAPI app, served from a Retriever built
elsewhere, with a user's own LLM backend (one that cannot stream)."""
from __future__ import annotations

import json
import time

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from medretrieve.server import ServerConfig, create_app  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"


class EchoBackend:
    """An LLM backend without ``stream``: answers citing source 1."""

    def generate(self, messages, **kwargs):
        return "Metformin is the first-line drug for type 2 diabetes [1]."


def _wait_ready(client: TestClient, path: str) -> None:
    for _ in range(600):
        if client.get(path).status_code == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never became ready")


def test_mounted_in_a_user_app_without_its_lifespan(medretrieve_collection):
    app = fastapi.FastAPI()
    app.mount("/retrieval", create_app(medretrieve_collection.directory, max_inflight=1))
    with TestClient(app) as client:
        first = client.get("/retrieval/readyz")
        assert first.status_code in (200, 503) and "Retry-After" in first.headers or first.status_code == 200
        _wait_ready(client, "/retrieval/readyz")  # the first request started the load
        r = client.post("/retrieval/v1/search", json={"question": QUESTION, "k": 2})
        assert r.status_code == 200 and r.json()["hits"][0]["document_id"] == "demo-002"


def test_mounted_with_its_lifespan(medretrieve_collection):
    retrieval = create_app(medretrieve_collection.directory)
    app = fastapi.FastAPI(lifespan=retrieval.router.lifespan_context)
    app.mount("/retrieval", retrieval)
    with TestClient(app) as client:
        _wait_ready(client, "/retrieval/readyz")
        assert client.get("/retrieval/v1/collection").json()["documents"] == 24


def test_served_from_a_retriever_with_a_backend_that_cannot_stream(medretrieve_retriever):
    app = create_app(medretrieve_retriever, backend=EchoBackend(), deadline_ms=1000)
    with TestClient(app) as client:
        assert client.get("/readyz").json()["status"] == "ready"  # nothing to load
        ans = client.post("/v1/answer", json={"question": QUESTION, "k": 3}).json()
        assert ans["citations"][0]["supported"] and ans["evidence"][0]["document_id"] == "demo-002"
        with client.stream("POST", "/v1/answer", json={"question": QUESTION, "k": 3, "stream": True}) as r:
            kinds = [line[6:].strip() for line in r.iter_lines() if line.startswith("event:")]
        assert kinds == ["evidence", "delta", "answer"]  # the whole text in one delta
        info = client.get("/v1/collection").json()
        assert info["server"]["answers"] and info["server"]["deadline_ms"] == 1000


def test_without_an_llm_answers_are_extractive_and_cited(medretrieve_retriever):
    app = create_app(medretrieve_retriever)
    with TestClient(app) as client:
        r = client.post("/v1/answer", json={"question": QUESTION, "k": 3})
        assert r.status_code == 200, r.text
        ans = r.json()
        assert not ans["abstained"] and "Metformin" in ans["text"] and ans["error"] is None
        assert ans["citations"] and all(c["supported"] for c in ans["citations"])
        assert any("extractive" in note for note in ans["notes"])
        with client.stream("POST", "/v1/answer", json={"question": QUESTION, "k": 3, "stream": True}) as r:
            events = [line for line in r.iter_lines() if line.startswith(("event:", "data:"))]
        kinds = [line[6:].strip() for line in events if line.startswith("event:")]
        assert kinds == ["evidence", "delta", "answer"]
        assert json.loads(events[3][5:])["text"] == json.loads(events[5][5:])["text"] == ans["text"]
        r = client.post("/v1/answer", json={"question": QUESTION, "mode": "bioasq"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "mode"
        assert client.get("/v1/collection").json()["server"]["answers"] == "extractive"


def test_bad_app_settings(medretrieve_retriever, medretrieve_collection):
    with pytest.raises(TypeError, match="inside the ServerConfig"):
        create_app(ServerConfig(str(medretrieve_collection.directory)), max_inflight=2)
    with pytest.raises(ValueError, match="enable_reload"):
        create_app(medretrieve_retriever, enable_reload=True)
    for bad, match in ((dict(max_inflight=0), "max_inflight"), (dict(max_queue=-2), "max_queue"),
                       (dict(max_batch=65), "max_batch"), (dict(deadline_ms=float("inf")), "deadline_ms"),
                       (dict(llm_url="http://x"), "go together")):
        with pytest.raises(ValueError, match=match):
            ServerConfig("col", **bad)
    assert ServerConfig.from_json(ServerConfig("col", max_inflight=3).to_json()).queue_size == 12
    with pytest.raises(ValueError, match="unknown settings"):
        ServerConfig.from_json(json.dumps({"collection": "col", "colour": 1}))
