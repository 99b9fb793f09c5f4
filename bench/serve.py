"""HTTP service benchmarks (``medretrieve serve`` on loopback; every run bounded in requests and seconds).

    python bench/serve.py overhead   [--chunks 100000 | --golden FILE...] [--queries 300] [--simd avx2,native]
    python bench/serve.py throughput [--chunks 100000] [--seconds 15] [--clients 1,4,16,64] [--workers 1,2]
    python bench/serve.py overload   [--chunks 100000] [--seconds 60] [--saturation QPS] [--workers 2]
    python bench/serve.py memory     [--chunks 100000]
    python bench/serve.py cpu        [--chunks 100000] [--queries 2000]
    python bench/serve.py client     [--queries 1000]

The collection: the BioASQ 7b snippets plus synthetic filler up to ``--chunks`` (``bench/retrieval.py``'s
``build_bioasq_collection`` and ``add_filler``, the collection of its ``latency`` benchmark), written once to
``--work``/bioasq-<chunks> and served from there. Questions: the 500 BioASQ 7b questions, cycled. Every search asks
for k=10 with the server's default deadline (300 ms) and the heuristic rerank.

Latencies are the client's (send to last byte) unless marked "server" (arrival at the app to the serialised
response, from ``Server-Timing``: what the server controls; ``medretrieve serve`` stamps the arrival at the
request's first byte, before uvicorn hands it to the app; the rest is sockets, the accept queue, and the clients'
and server's event loops waiting for a CPU).

- overhead: the same questions searched in-process (``Retriever.search``, encoders on one thread as the server
  opens them) and over HTTP (one worker, one keep-alive connection per client) with four clients:
  ``medretrieve.client.Client`` (what users call: the request checked by the server's models, a ``SearchResult``
  back, over its lean keep-alive transport), ``medretrieve.client.AsyncClient`` (the same from one event loop,
  each search awaited by ``run_until_complete``), raw httpx, and raw ``http.client`` (a stdlib baseline that
  reads the body without parsing it), interleaved in rotating order so the box's load hits every path alike. "Added by HTTP" is, per request, the client's
  round trip minus the search's own time as the server reports it (``Server-Timing: work``); "beyond the
  server" the round trip minus the server's whole time (``Server-Timing: total``, arrival to serialised
  response). Response bytes: the body of each search (compact; ``--explain`` asks for stage reasons and per-stage
  scores, as servers before the compact form always sent them). The SIMD level is the server's
  (``MEDRETRIEVE_SIMD`` caps it); ``--simd avx2,native`` runs once per level (child processes) and ends with each
  level's serving cost: ``Client``'s p50 round trip minus the in-process p50 for the same requests (issue 42).
  ``--golden FILE...`` serves a collection built from BioASQ golden files instead of BioASQ + filler.
- throughput: closed-loop clients (asyncio + aiohttp, each sends its next request when the last one answered;
  after a 429 it waits the Retry-After) for ``--seconds`` per cell; each worker gets ``--max-inflight`` =
  CPUs / workers. The load generator shares the machine's CPUs with the server.
- overload: open-loop Poisson arrivals at 2x ``--saturation`` (default: the QPS of a 10 s closed-loop run with
  twice as many clients as the server has slots) for ``--seconds``, after every question went through every
  worker twice; every request has a 2 s client timeout; the server's memory (sum of RSS over its processes) is
  sampled every 2 s.
- cpu: CPU time (not wall time, so the box's load does not count) of the app's own path per request, in one
  process through httpx's ASGI transport (no sockets): ``/healthz`` (the client's share plus a trivial endpoint)
  and ``/v1/search`` with the search replaced by a canned result of a real one (validation, admission, thread-pool
  hand-off, metrics, serialisation).
- client: CPU time of the client's own process per search (load-independent) against uvicorn answering a canned
  11.2 kB search response from another process: ``medretrieve.client.Client`` and ``AsyncClient``, raw httpx, raw
  ``http.client``.
- memory: RSS, PSS and private memory (USS) of each worker after warm-up, for 1 and 2 workers (a collection is
  always opened memory-mapped: chunk arrays, BM25 matrix and dense index).
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import aiohttp
import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval as rb  # noqa: E402  (bench/retrieval.py: the 100k collection of its latency benchmark)

from medretrieve.client import AsyncClient, Client  # noqa: E402
from medretrieve.testing.server import ServerProcess  # noqa: E402

CPUS = len(os.sched_getaffinity(0))


# ----------------------------------------------------------------- the collection and the questions

def collection_dir(args: argparse.Namespace) -> Path:
    """``--collection`` when given; else the collection of the ``--golden`` BioASQ golden files (every snippet a
    chunk); else the BioASQ + filler collection of ``args.chunks`` chunks on disk (each built once)."""
    if args.collection:
        return Path(args.collection)
    if args.golden:
        return golden_collection(args.encoder, Path(args.work), [Path(f) for f in args.golden])
    return rb.filled_collection(args.encoder, Path(args.work), args.chunks)


def golden_collection(encoder: Optional[str], work: Path, files: Sequence[Path]) -> Path:
    """A collection built from BioASQ golden files (``format="bioasq"``: every distinct snippet a chunk), under
    ``work`` once per set of files."""
    from medretrieve.corpus.collection import Collection

    out = work / ("golden-" + "-".join(sorted(f.stem for f in files)))
    if not (out / "manifest.json").is_file():
        Collection.build(list(files), out, encoder=encoder or "default", format="bioasq", progress=False,
                         overwrite=True)
    return out


def questions(n: int) -> List[str]:
    bodies = [q["body"] for q in rb.load_questions()]
    return [bodies[i % len(bodies)] for i in range(n)]


def pct(values: Sequence[float], p: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), p)) if len(values) else float("nan")


def server(col: Path, workers: int, *extra: str) -> ServerProcess:
    inflight = max(1, CPUS // workers)
    return ServerProcess(col, ["--workers", str(workers), "--max-inflight", str(inflight), *extra], startup_s=900)


def _parse_server_timing(header: str) -> Dict[str, float]:
    parts = (p.strip().split(";dur=") for p in header.split(",") if p.strip())
    return {name: float(value) for name, value in parts}


def _server_timing(response: httpx.Response) -> Dict[str, float]:
    return _parse_server_timing(response.headers.get("server-timing", ""))


# ----------------------------------------------------------------- overhead

class StdlibClient:
    """The leanest HTTP/1.1 keep-alive client at hand (``http.client``): what a round trip costs when the client
    adds almost nothing, to tell the client's share of the overhead (httpx: ~0.5 ms CPU a request) from the
    server's."""

    def __init__(self, url: str) -> None:
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=10.0)

    def post(self, path: str, payload: dict) -> Tuple[int, Dict[str, float], int]:
        self.conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        body = response.read()
        return response.status, _parse_server_timing(response.getheader("server-timing") or ""), len(body)

    def close(self) -> None:
        self.conn.close()


class OverheadRow:
    """One client's round trips and how they split (ms per request)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.round_trip: List[float] = []
        self.added: List[float] = []  # round trip - the server's search time
        self.server_own: List[float] = []  # arrival to serialised response, minus queue and search
        self.outside: List[float] = []  # round trip - arrival to response: client, sockets, uvicorn, scheduling
        self.nbytes: List[int] = []  # response body bytes

    def add(self, round_trip_ms: float, timing: Dict[str, float], nbytes: int) -> None:
        self.round_trip.append(round_trip_ms)
        self.nbytes.append(nbytes)
        self.added.append(round_trip_ms - timing["work"])
        self.server_own.append(timing["total"] - timing["work"] - timing["queue"])
        self.outside.append(round_trip_ms - timing["total"])


def overhead(args: argparse.Namespace) -> None:
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever

    col = collection_dir(args)
    qs = questions(args.queries)
    ret = Retriever(Collection.open(col, encoder_threads=1))  # as the server opens it
    lib: List[float] = []
    rows = {"client": OverheadRow("medretrieve.client.Client (search: request checked, SearchResult back)"),
            "async": OverheadRow("medretrieve.client.AsyncClient (the same, awaited)"),
            "httpx": OverheadRow("httpx.Client"), "stdlib": OverheadRow("http.client (stdlib)")}
    loop = asyncio.new_event_loop()
    with server(col, 1) as srv, httpx.Client(base_url=srv.url, timeout=10.0) as hx, Client(srv.url) as ours:
        lean = StdlibClient(srv.url)
        theirs = AsyncClient(srv.url)

        def via_async(body: dict) -> Tuple[int, Dict[str, float], int]:
            loop.run_until_complete(theirs.search(body["question"], k=body["k"], explain=body.get("explain", False)))
            return 200, theirs.last_server_timing, 0  # a failure raises

        def via_httpx(body: dict) -> Tuple[int, Dict[str, float], int]:
            r = hx.post("/v1/search", json=body)
            return r.status_code, _server_timing(r), len(r.content)

        def via_client(body: dict) -> Tuple[int, Dict[str, float], int]:
            ours.search(body["question"], k=body["k"], explain=body.get("explain", False))
            return 200, ours.last_server_timing, 0  # a failure raises

        clients = {"client": via_client, "async": via_async, "httpx": via_httpx,
                   "stdlib": lambda body: lean.post("/v1/search", body)}
        extra = {"explain": True} if args.explain else {}
        for q in qs[:20]:  # warm every path
            ret.search(q, k=10, deadline_ms=300)
            for send in clients.values():
                send({"question": q, "k": 10, **extra})
        order = list(clients)
        for i, q in enumerate(qs):
            t0 = time.perf_counter()
            ret.search(q, k=10, deadline_ms=300)
            lib.append((time.perf_counter() - t0) * 1000)
            for name in order[i % len(order):] + order[:i % len(order)]:  # rotate who goes first
                t0 = time.perf_counter()
                status, timing, nbytes = clients[name]({"question": q, "k": 10, **extra})
                assert status == 200, status
                rows[name].add((time.perf_counter() - t0) * 1000, timing, nbytes)
        lean.close()
        loop.run_until_complete(theirs.aclose())
        loop.close()
        simd = _simd_of(srv)
    print(f"\nHTTP overhead: {col.name}, {len(qs)} questions interleaved (in-process, then the "
          f"clients in rotating order), deadline 300 ms, k=10, 1 worker, one keep-alive connection per client, server "
          f"SIMD {simd}, {'explain' if args.explain else 'compact'} responses of "
          f"{np.mean(rows['stdlib'].nbytes):.0f} bytes on average\n")
    print("| client | path | p50 ms | p90 ms | p99 ms | mean ms |")
    print("|---|---|---|---|---|---|")

    def line(client: str, name: str, values: Sequence[float]) -> None:
        print(f"| {client} | {name} | {pct(values, 50):.2f} | {pct(values, 90):.2f} | {pct(values, 99):.2f} | "
              f"{np.mean(values):.2f} |")

    line("-", "in-process Retriever.search", lib)
    for row in rows.values():
        line(row.name, "POST /v1/search (round trip)", row.round_trip)
        line(row.name, "added by HTTP (round trip - the server's search time, per request)", row.added)
        line(row.name, "beyond the server (round trip - Server-Timing total, per request)", row.outside)
        line(row.name, "of which in the server (arrival to serialised response, minus queue and search)",
             row.server_own)
    for row in rows.values():
        print(f"\n{row.name}: round-trip percentile minus in-process percentile: "
              f"p50 {pct(row.round_trip, 50) - pct(lib, 50):+.2f} ms, p99 {pct(row.round_trip, 99) - pct(lib, 99):+.2f} ms")
    # the serving cost of issue 42 (the same request in process and through Client), for --simd's summary
    cost = {"simd": simd, "questions": len(qs), "in_process_p50": pct(lib, 50),
            "client_p50": pct(rows["client"].round_trip, 50),
            "client_beyond_total_p50": pct(rows["client"].outside, 50)}
    print(SERVING_COST + json.dumps(cost))


SERVING_COST = "serving cost: "


def overhead_per_simd(args: argparse.Namespace) -> None:
    """``overhead`` once per SIMD level of ``--simd`` (each in a child process with ``MEDRETRIEVE_SIMD`` set, so the
    in-process search and the server run at that level), then the serving cost of each: Client's p50 round trip
    minus the in-process p50 for the same requests."""
    import subprocess

    given = sys.argv[1:]
    argv = [a for i, a in enumerate(given) if not (a.startswith("--simd") or (i and given[i - 1] == "--simd"))]
    costs = []
    for level in args.simd:
        env = {k: v for k, v in os.environ.items() if k != "MEDRETRIEVE_SIMD"}
        if level != "native":
            env["MEDRETRIEVE_SIMD"] = level
        done = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True,
                              timeout=3600)
        print(done.stdout, end="")
        if done.returncode != 0:
            raise SystemExit(f"overhead at SIMD {level} failed:\n{done.stderr[-3000:]}")
        costs += [json.loads(line[len(SERVING_COST):]) for line in done.stdout.splitlines()
                  if line.startswith(SERVING_COST)]
    print("\n| server SIMD | questions | in-process p50 ms | Client p50 ms | serving cost (Client p50 - in-process "
          "p50) ms | Client beyond Server-Timing total, p50 ms |")
    print("|---|---|---|---|---|---|")
    for c in costs:
        print(f"| {c['simd']} | {c['questions']} | {c['in_process_p50']:.2f} | {c['client_p50']:.2f} | "
              f"**{c['client_p50'] - c['in_process_p50']:+.2f}** | {c['client_beyond_total_p50']:.2f} |")


def _simd_of(srv: ServerProcess) -> str:
    """The SIMD level the server's native core runs at (its environment caps it as this process's would)."""
    import subprocess

    code = "import medretrieve; print(medretrieve.simd_level())"
    return subprocess.run([sys.executable, "-c", code], env=srv.env, capture_output=True, text=True,
                          check=True).stdout.strip()


# ----------------------------------------------------------------- load generation

class Tally:
    """What a load run saw: latencies (ms) of the 200s as the client saw them and as the server did (arrival to
    response, from Server-Timing), and counts by outcome."""

    def __init__(self) -> None:
        self.ok_ms: List[float] = []
        self.server_ms: List[float] = []
        self.counts: Dict[str, int] = {}

    def add(self, outcome: str, ms: Optional[float] = None, server_ms: Optional[float] = None) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if outcome == "200" and ms is not None:
            self.ok_ms.append(ms)
            if server_ms is not None:
                self.server_ms.append(server_ms)

    def errors(self) -> int:
        return sum(n for k, n in self.counts.items() if k not in ("200", "429"))


async def _one(http: "aiohttp.ClientSession", question: str, tally: Tally) -> Optional[float]:
    """One search; returns the Retry-After (s) of a 429."""
    t0 = time.perf_counter()
    try:
        async with http.post("/v1/search", json={"question": question, "k": 10}) as r:
            await r.read()
            status, headers = r.status, r.headers
    except asyncio.TimeoutError:
        tally.add("client timeout")
        return None
    except aiohttp.ClientError as exc:
        tally.add(type(exc).__name__)
        return None
    timing = _parse_server_timing(headers.get("server-timing", ""))
    tally.add(str(status), (time.perf_counter() - t0) * 1000, timing.get("total"))
    return float(headers.get("Retry-After", 1)) if status == 429 else None


def _session(url: str, connections: int, timeout_s: float) -> "aiohttp.ClientSession":
    # aiohttp, not httpx, generates the load: httpx's async pool served 64 concurrent connections at ~55
    # requests/s against /healthz here, aiohttp at ~1,400 (measured on this box), so httpx would be the bottleneck
    return aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(limit=connections),
                                 timeout=aiohttp.ClientTimeout(total=timeout_s))


async def closed_loop(url: str, clients: int, seconds: float, qs: Sequence[str]) -> Tally:
    tally = Tally()
    end = time.monotonic() + seconds
    async with _session(url, clients, 5.0) as http:
        async def client(i: int) -> None:
            n = i
            while time.monotonic() < end:
                wait = await _one(http, qs[n % len(qs)], tally)
                n += clients
                if wait:
                    await asyncio.sleep(min(wait, max(end - time.monotonic(), 0)))

        await asyncio.gather(*(client(i) for i in range(clients)))
    return tally


async def each_question(url: str, qs: Sequence[str], times: int, clients: int) -> Tally:
    """Every question ``times`` times, ``clients`` at a time, with no deadline (a warm-up)."""
    tally = Tally()
    todo = [q for q in qs for _ in range(times)]
    async with _session(url, clients, 60.0) as http:
        async def client(i: int) -> None:
            for q in todo[i::clients]:
                async with http.post("/v1/search", json={"question": q, "k": 10, "deadline_ms": 60000}) as r:
                    await r.read()
                    tally.add(str(r.status))

        await asyncio.gather(*(client(i) for i in range(clients)))
    return tally


async def open_loop(url: str, rate: float, seconds: float, qs: Sequence[str], timeout_s: float) -> Tally:
    """Poisson arrivals at ``rate`` per second; each request answered or timed out on its own."""
    tally = Tally()
    rng = random.Random(0)
    async with _session(url, 1000, timeout_s) as http:
        tasks = []
        start = time.monotonic()
        at, i = 0.0, 0
        while at < seconds:
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(http, qs[i % len(qs)], tally)))
            i += 1
            at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
    return tally


# ----------------------------------------------------------------- throughput, overload

def throughput(args: argparse.Namespace) -> None:
    col = collection_dir(args)
    qs = questions(500)
    print(f"\nThroughput vs concurrency: {args.chunks} chunks, closed loop, {args.seconds:g} s per cell, "
          f"{CPUS} CPUs (shared with the load generator)\n")
    print("| workers | max-inflight per worker | clients | QPS (200) | p50 ms | p99 ms | server p50 / p99 ms | "
          "shed (429) | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workers in args.workers:
        with server(col, workers) as srv:
            asyncio.run(closed_loop(srv.url, 4, 3.0, qs))  # warm every worker
            for clients in args.clients:
                t = asyncio.run(closed_loop(srv.url, clients, args.seconds, qs))
                print(f"| {workers} | {max(1, CPUS // workers)} | {clients} | {len(t.ok_ms) / args.seconds:.1f} | "
                      f"{pct(t.ok_ms, 50):.1f} | {pct(t.ok_ms, 99):.1f} | "
                      f"{pct(t.server_ms, 50):.1f} / {pct(t.server_ms, 99):.1f} | {t.counts.get('429', 0)} | "
                      f"{t.errors()} {_other(t)}|")
                sys.stdout.flush()


def _other(t: Tally) -> str:
    other = {k: n for k, n in t.counts.items() if k not in ("200", "429")}
    return f"({other}) " if other else ""


def _rss_kib(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def server_pids(srv: ServerProcess) -> List[int]:
    """The server's process and its uvicorn workers (not multiprocessing's resource tracker)."""
    assert srv.process is not None
    pids = [srv.process.pid]
    for child in Path("/proc").glob("[0-9]*"):
        try:
            stat = (child / "stat").read_text()
            cmd = (child / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == srv.process.pid and b"resource_tracker" not in cmd:
            pids.append(int(child.name))
    return pids


def overload(args: argparse.Namespace) -> None:
    col = collection_dir(args)
    qs = questions(500)
    workers = args.workers[-1]
    with server(col, workers) as srv:
        # every question through every worker twice first: each retriever's token-set cache (bounded, one set
        # per chunk touched) then holds what these questions touch, and the memory left to watch is the serving
        asyncio.run(each_question(srv.url, qs, 2 * workers, clients=4))
        saturation = args.saturation
        if saturation is None:  # closed loop with twice as many clients as slots: every slot kept busy
            slots = workers * max(1, CPUS // workers)
            t = asyncio.run(closed_loop(srv.url, 2 * slots, 10.0, qs))
            saturation = len(t.ok_ms) / 10.0
        rate = 2 * saturation
        pids = server_pids(srv)
        samples: List[Tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            t0 = time.monotonic()
            while not stop.wait(2.0):
                samples.append((time.monotonic() - t0, _rss_kib(pids)))

        sampler = threading.Thread(target=sample, daemon=True)
        rss_before = _rss_kib(pids)
        sampler.start()
        t0 = time.monotonic()
        tally = asyncio.run(open_loop(srv.url, rate, args.seconds, qs, timeout_s=2.0))
        wall = time.monotonic() - t0
        stop.set()
        sampler.join()
    sent = sum(tally.counts.values())
    rss = [kib for _, kib in samples]
    print(f"\nOverload: {args.chunks} chunks, {workers} workers x {max(1, CPUS // workers)} slots, saturation "
          f"{saturation:.1f} QPS, offered {rate:.1f} QPS (Poisson) for {args.seconds:g} s, client timeout 2 s\n")
    print("| offered QPS | sent | accepted (200) QPS | accepted p50 ms | p99 ms | max ms | server p99 ms | shed 429 "
          "| 504 | 5xx | client timeouts | server RSS MiB start / end / max |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    five = sum(n for k, n in tally.counts.items() if k.isdigit() and int(k) >= 500 and k != "504")
    print(f"| {rate:.1f} | {sent} | {len(tally.ok_ms) / wall:.1f} | {pct(tally.ok_ms, 50):.1f} | "
          f"{pct(tally.ok_ms, 99):.1f} | {max(tally.ok_ms, default=float('nan')):.1f} | "
          f"{pct(tally.server_ms, 99):.1f} | "
          f"{tally.counts.get('429', 0)} ({tally.counts.get('429', 0) / max(sent, 1):.0%}) | "
          f"{tally.counts.get('504', 0)} | {five} | {tally.counts.get('client timeout', 0)} | "
          f"{rss_before / 1024:.0f} / {rss[-1] / 1024 if rss else float('nan'):.0f} / "
          f"{max(rss, default=0) / 1024:.0f} |")
    print(f"  outcomes: {tally.counts}", file=sys.stderr)
    print("  server RSS MiB every 10 s: " + ", ".join(f"{kib / 1024:.0f}" for t, kib in samples[4::5]))


# ----------------------------------------------------------------- memory

def _smaps(pid: int) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        out[name] = int(value.split()[0])
    return out


def memory(args: argparse.Namespace) -> None:
    col = collection_dir(args)
    qs = questions(100)
    index_mib = (col / "dense.index").stat().st_size / 2**20
    print(f"\nMemory per worker: {args.chunks} chunks (dense.index {index_mib:.0f} MiB), after 100 searches; "
          "MiB from /proc/PID/smaps_rollup\n")
    print("| workers | worker | RSS | PSS | private (USS) | shared |")
    print("|---|---|---|---|---|---|")
    for workers in (1, 2):
        with server(col, workers) as srv:
            asyncio.run(closed_loop(srv.url, 4, 0.1, qs))  # touch every worker
            with httpx.Client(base_url=srv.url, timeout=30.0) as http:
                for q in qs:
                    http.post("/v1/search", json={"question": q, "k": 10})
            pids = server_pids(srv)
            worker_pids = pids if workers == 1 else pids[1:]
            for i, pid in enumerate(worker_pids, 1):
                m = _smaps(pid)
                uss = m["Private_Clean"] + m["Private_Dirty"]
                print(f"| {workers} | {i} | {m['Rss'] / 1024:.0f} | "
                      f"{m['Pss'] / 1024:.0f} | {uss / 1024:.0f} | {(m['Rss'] - uss) / 1024:.0f} |")
            sys.stdout.flush()


def cpu(args: argparse.Namespace) -> None:
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.server import create_app

    ret = Retriever(Collection.open(collection_dir(args), encoder_threads=1))
    canned = ret.search(questions(1)[0], k=10, deadline_ms=300)

    class Canned:  # the search's own cost is measured elsewhere: here only the app's path around it
        collection = ret.collection

        def search(self, question: str, **kwargs: object) -> object:
            return canned

    app = create_app(ret)
    app.state.engine.snapshot.retriever = Canned()

    async def per_request(http: httpx.AsyncClient, method: str, path: str, body: Optional[dict]) -> float:
        for _ in range(100):
            await http.request(method, path, json=body)
        t0 = time.process_time()
        for _ in range(args.queries):
            assert (await http.request(method, path, json=body)).status_code == 200
        return (time.process_time() - t0) * 1000.0 / args.queries

    async def run() -> Dict[str, float]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                return {"healthz": await per_request(http, "GET", "/healthz", None),
                        "search": await per_request(http, "POST", "/v1/search", {"question": canned.question,
                                                                               "k": 10})}

    ms = asyncio.run(run())
    print(f"\nCPU per request, app path only (canned search result of {len(canned.hits)} hits, "
          f"{args.queries} requests, client and app in one process, no sockets)\n")
    print("| request | CPU ms per request |")
    print("|---|---|")
    print(f"| GET /healthz (client + trivial endpoint) | {ms['healthz']:.3f} |")
    print(f"| POST /v1/search, canned result | {ms['search']:.3f} |")
    print(f"| difference: the search endpoint's own path | {ms['search'] - ms['healthz']:.3f} |")


def _canned_body() -> bytes:
    """A compact search response of 10 hits with 780-character texts (11.2 kB: a little more than the 100k
    collection's 8.3 kB)."""
    from medretrieve.records import Hit, SearchResult, StageInfo

    span = {"beginSection": "abstract", "endSection": "abstract", "offsetInBeginSection": 0, "offsetInEndSection": 780}
    hits = [Hit(f"c{i}", str(30000000 + i), "x" * 780, "A title of an abstract", "results", 0.5, {}, {"year": 2020},
                None, span) for i in range(10)]
    stages = [StageInfo(name, True, "", 1.0) for name in ("route", "dense", "bm25", "rrf", "rerank", "recovery")]
    result = SearchResult("q", hits, "factoid", False, [], False, stages, {"total": 20.0}, rerank_depth=50)
    return orjson.dumps(result.to_dict(explain=False))


def canned_server(args: argparse.Namespace) -> None:
    """uvicorn answering every request with :func:`_canned_body` (``client``'s peer, run as its own process)."""
    import uvicorn

    body = _canned_body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"server-timing", b"queue;dur=0.01, work;dur=20.00, total;dur=20.30")]

    async def app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


def client_cpu(args: argparse.Namespace) -> None:
    """CPU time of the client process per search (not wall time: the box's load does not count) against a canned
    server in another process, for ``medretrieve.client.Client``, raw httpx and raw ``http.client``."""
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    peer = subprocess.Popen([sys.executable, __file__, "canned-server", "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    question = questions(1)[0]
    try:
        for _ in range(300):
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        loop = asyncio.new_event_loop()
        theirs = AsyncClient(url)
        with Client(url) as ours, httpx.Client(base_url=url, timeout=10.0) as hx:
            lean = StdlibClient(url)
            sends = {"medretrieve.client.Client.search (SearchResult back)": lambda: ours.search(question, k=10),
                     "medretrieve.client.AsyncClient.search (awaited)":
                         lambda: loop.run_until_complete(theirs.search(question, k=10)),
                     "httpx.Client.post + .json()": lambda: hx.post("/v1/search",
                                                                    json={"question": question, "k": 10}).json(),
                     "http.client + json.loads": lambda: lean.post("/v1/search", {"question": question, "k": 10})}
            ms: Dict[str, List[float]] = {name: [] for name in sends}
            for _ in range(3):  # rounds, so that a burst of load hits every client alike
                for name, send in sends.items():
                    for _ in range(50):
                        send()
                    t0 = time.process_time()
                    for _ in range(args.queries):
                        send()
                    ms[name].append((time.process_time() - t0) * 1000.0 / args.queries)
            lean.close()
            loop.run_until_complete(theirs.aclose())
            loop.close()
    finally:
        peer.terminate()
        peer.wait(10)
    print(f"\nClient CPU per search ({len(_canned_body())}-byte canned response from uvicorn in another process, "
          f"{args.queries} requests x 3 rounds per client, one keep-alive connection)\n")
    print("| client | CPU ms per search (median of 3 rounds) |")
    print("|---|---|")
    for name, values in ms.items():
        print(f"| {name} | {float(np.median(values)):.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("overhead", "throughput", "overload", "memory", "cpu", "client",
                                    "canned-server"))
    p.add_argument("--port", type=int, default=0, help="canned-server: its port (run by client)")
    p.add_argument("--encoder", default=None, help="encoder dir (default: the embedded default encoder)")
    p.add_argument("--work", default="/tmp/medretrieve-bench-serve")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--collection", default=None, help="serve this collection directory instead of building one")
    p.add_argument("--queries", type=int, default=300, help="overhead: questions; cpu: requests per endpoint; client: per client and round")
    p.add_argument("--seconds", type=float, default=None, help="per cell (throughput 15) / overload run (60)")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 64])
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    p.add_argument("--explain", action="store_true", help="overhead: ask for explained (uncompact) responses")
    p.add_argument("--golden", nargs="+", default=None,
                   help="serve a collection built from these BioASQ golden files (instead of BioASQ + filler)")
    p.add_argument("--simd", type=lambda s: s.split(","), default=None,
                   help="overhead: run once per SIMD level (e.g. avx2,native; each in a child process with "
                        "MEDRETRIEVE_SIMD set) and print each level's serving cost")
    p.add_argument("--saturation", type=float, default=None, help="overload: saturation QPS (default: measured)")
    args = p.parse_args()
    if args.what == "canned-server":
        canned_server(args)
        return
    if args.encoder is None:
        from medretrieve.models.encoders import default_model_dir

        args.encoder = str(default_model_dir())
    if args.seconds is None:
        args.seconds = 60.0 if args.what == "overload" else 15.0
    if not rb.DATA.is_dir():
        sys.exit(f"no BioASQ data at {rb.DATA}")
    if args.what == "overhead" and args.simd:
        collection_dir(args)  # built once, before the runs
        overhead_per_simd(args)
        return
    {"overhead": overhead, "throughput": throughput, "overload": overload, "memory": memory,
     "cpu": cpu, "client": client_cpu}[args.what](args)


if __name__ == "__main__":
    main()
