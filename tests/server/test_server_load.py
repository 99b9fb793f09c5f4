"""A real server under pressure: deadline expiry in the queue (504, no work), shedding (429 with Retry-After,
queue full or deadline out of reach), SIGTERM with a request in flight, two workers sharing the index through
mmap, their metrics and a reload that reaches both without failing requests.

A slot is held by a batch of 64 searches (k=100, every stage on), which keeps a one-slot server busy for seconds.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from medretrieve.testing.server import ServerProcess

SLOW_BATCH = {"questions": [f"Which drugs treat disease number {i} and what are their side effects?"
                            for i in range(64)], "k": 100, "deadline_ms": 120000}


def _metric(http: httpx.Client, name: str) -> float:
    text = http.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _wait_for(check, timeout_s: float = 30.0, what: str = "condition") -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class _Background:
    """One request in a thread; ``.response`` once it is done."""

    def __init__(self, url: str, path: str, body: dict) -> None:
        self.response = None

        def run() -> None:
            with httpx.Client(base_url=url, timeout=120.0) as c:
                self.response = c.post(path, json=body)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self) -> httpx.Response:
        self.thread.join(120)
        assert self.response is not None
        return self.response


def test_deadline_in_queue_is_504_without_work_and_overload_is_shed_with_retry_after(medretrieve_collection):
    with ServerProcess(medretrieve_collection.directory, ["--max-inflight", "1", "--max-queue", "2"]) as srv, \
            httpx.Client(base_url=srv.url, timeout=30.0) as http:
        working = _Background(srv.url, "/v1/search:batch", SLOW_BATCH)
        _wait_for(lambda: _metric(http, 'medretrieve_inflight{kind="search"}') == 1, what="the batch to work")
        waiting = _Background(srv.url, "/v1/search:batch", SLOW_BATCH)
        _wait_for(lambda: _metric(http, 'medretrieve_queued{kind="search"}') == 1, what="the batch to queue")

        t0 = time.monotonic()
        # (100 ms: short of the ~140 ms the admission expects to wait and work before it has learned anything, yet
        # long enough not to have passed already on arrival, which is a 504 of its own on a loaded machine)
        r = http.post("/v1/search", json={"question": "gout", "deadline_ms": 100})
        assert r.status_code == 429 and r.json()["error"]["type"] == "overloaded"
        assert "deadline" in r.json()["error"]["message"] and int(r.headers["Retry-After"]) >= 1

        classified = _metric(http, 'medretrieve_stage_duration_seconds_count{stage="classify"}')
        t0 = time.monotonic()
        r = http.post("/v1/search", json={"question": "gout"}, headers={"X-Deadline-Ms": "300"})
        waited = time.monotonic() - t0
        assert r.status_code == 504 and r.json()["error"]["type"] == "deadline_exceeded"
        assert 0.25 < waited < 5.0  # it waited for its deadline, not for the batches
        assert _metric(http, 'medretrieve_deadline_misses_total{endpoint="/v1/search",phase="queue"}') == 1

        queued = _Background(srv.url, "/v1/search", {"question": "asthma inhaler", "deadline_ms": 120000})
        _wait_for(lambda: _metric(http, 'medretrieve_queued{kind="search"}') == 2, what="a second queued request")
        t0 = time.monotonic()
        r = http.post("/v1/search", json={"question": "gout", "deadline_ms": 120000})
        assert r.status_code == 429 and "queue is full" in r.json()["error"]["message"]
        assert time.monotonic() - t0 < 2.0 and int(r.headers["Retry-After"]) >= 1

        for done in (working, waiting, queued):
            assert done.result().status_code == 200
        assert len(working.result().json()["results"]) == 64
        # the 504 did no work: only the 64 + 64 + 1 accepted searches were classified
        assert _metric(http, 'medretrieve_stage_duration_seconds_count{stage="classify"}') == classified + 129 - 0
        assert _metric(http, 'medretrieve_shed_total{endpoint="/v1/search",reason="deadline"}') == 1
        assert _metric(http, 'medretrieve_shed_total{endpoint="/v1/search",reason="queue_full"}') == 1
        assert _metric(http, 'medretrieve_requests_total{endpoint="/v1/search",status="500"}') == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_collection_that_does_not_load_stops_the_server(tmp_path, medretrieve_collection, workers):
    broken = tmp_path / "broken"
    shutil.copytree(medretrieve_collection.directory, broken)
    (broken / "dense.index").write_bytes(b"not an index")
    srv = ServerProcess(broken, ["--workers", workers], startup_s=120)
    with pytest.raises(RuntimeError, match="did not start"):
        srv.start()
    assert srv.returncode == 2 and "medretrieve serve: RuntimeError: could not load" in srv.log()
    assert "bad magic" in srv.log().splitlines()[-1]
    srv.close()


def test_sigterm_finishes_the_request_in_flight_and_exits_0(medretrieve_collection):
    with ServerProcess(medretrieve_collection.directory, ["--max-inflight", "1"]) as srv:
        with httpx.Client(base_url=srv.url, timeout=30.0) as http:
            working = _Background(srv.url, "/v1/search:batch", SLOW_BATCH)
            _wait_for(lambda: _metric(http, 'medretrieve_inflight{kind="search"}') == 1, what="the batch to work")
        srv.process.terminate()  # SIGTERM
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):  # no longer accepting
            httpx.get(f"{srv.url}/healthz", timeout=5.0)
        r = working.result()
        assert r.status_code == 200 and len(r.json()["results"]) == 64
        assert srv.process.wait(60) == 0  # exits by itself, 0
        assert "Finished server process" in srv.log() and "Traceback" not in srv.log()


def _children(pid: int) -> list:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_two_workers_share_the_index_count_together_and_reload_together(medretrieve_collection, tmp_path):
    from medretrieve.corpus.collection import Collection

    col_dir = tmp_path / "col"
    shutil.copytree(medretrieve_collection.directory, col_dir)
    with ServerProcess(col_dir, ["--workers", "2", "--enable-reload", "--max-inflight", "1"]) as srv:
        workers = [p for p in _children(srv.process.pid) if Path(f"/proc/{p}/maps").exists()
                   and "dense.index" in Path(f"/proc/{p}/maps").read_text()]
        assert len(workers) == 2  # both serve the index from the same memory-mapped file

        def get(path: str) -> httpx.Response:  # a new connection each time: either worker may answer
            return httpx.get(f"{srv.url}{path}", timeout=30.0)

        assert all(get("/readyz").status_code == 200 for _ in range(6))  # both loaded before they accepted
        for _ in range(10):
            assert httpx.post(f"{srv.url}/v1/search", json={"question": "gout"}, timeout=30.0).status_code == 200
        with httpx.Client(base_url=srv.url) as http:  # every worker's counts, whichever answers
            assert _metric(http, 'medretrieve_requests_total{endpoint="/v1/search",status="200"}') == 10

        before = get("/v1/collection").json()["chunks"]
        Collection.open(col_dir).add([{"id": "new-1", "title": "Zolbetuximab",
                                       "text": "Zolbetuximab targets claudin 18.2 in gastric cancer."}])
        failures = []
        stop = threading.Event()

        def keep_searching() -> None:
            while not stop.is_set():
                r = httpx.post(f"{srv.url}/v1/search", json={"question": "gastric cancer claudin"}, timeout=30.0)
                if r.status_code != 200:
                    failures.append(r.status_code)

        searcher = threading.Thread(target=keep_searching, daemon=True)
        searcher.start()
        r = httpx.post(f"{srv.url}/v1/admin/reload", timeout=60.0)
        assert r.status_code == 200 and r.json()["generation"] == 2 and r.json()["chunks"] == before + 1
        # Until each worker has answered from the new generation: any number of answers in a row may come from the
        # one that reloaded first, while the other still polls the reload stamp or loads.
        reloaded = set()

        def both_reloaded() -> bool:
            info = get("/v1/collection").json()
            if info["chunks"] == before + 1 and info["server"]["generation"] == 2:
                reloaded.add(info["server"]["pid"])
            return reloaded >= set(workers)

        _wait_for(both_reloaded, timeout_s=60.0, what="both workers to reload")
        stop.set()
        searcher.join(60)
        assert failures == []
        # An unhurried search: under the default 300 ms a loaded machine may cut stages.
        hit = httpx.post(f"{srv.url}/v1/search", json={"question": "zolbetuximab claudin", "k": 1,
                                                        "deadline_ms": 60_000.0}, timeout=90.0).json()
        assert hit["hits"][0]["document_id"] == "new-1", hit
        srv.stop()
        assert srv.returncode == 0 and "leaked" not in srv.log() and "Traceback" not in srv.log()
