"""``medretrieve mcp`` under faults (issue 43, items 4-6): every request line gets a reply, over stdio (a real
subprocess fed raw bytes) and over ``--http``; answers are bounded, cancellable, and never hold up a search; over a
server URL an answer may take as long as ``--answer-deadline-ms`` says.

Before these fixes a broken stdio line got no reply at all (the agent waited for its own timeout), a search waited
9-15 s for a worker thread behind 40 answers on a slow LLM, cancelled answers ran on, and every answer over a URL
longer than 10 s failed."""
from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("mcp")

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from mcp import Client  # noqa: E402
from mcp_process import mcp_http  # noqa: E402

from medretrieve.integrations.mcp_server import Engine, build_server  # noqa: E402
from medretrieve.integrations.mcp_transport import MAX_LINE_BYTES, LineSplitter, readable_id  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
REPLY_S = 20.0  # the longest a line may wait for its reply (s; a loaded 2-core CI machine)
START_S = 120.0  # the longest the server may take to start (s)


def _call(request_id, arguments: bytes) -> bytes:
    return (b'{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"search","arguments":%s}}'
            % (json.dumps(request_id).encode(), arguments))


DEEP = 100_000
# (name, the raw line, the JSON-RPC error code expected, the id expected in the reply)
BROKEN_LINES = [
    ("lone surrogate (an emoji cut in half)", _call(1, b'{"question":"gout \\ud83d"}'), -32700, 1),
    ("k of 5,000 digits", _call(2, b'{"question":"gout","k":' + b"9" * 5000 + b"}"), -32700, 2),
    ("arguments nested 100k deep", _call(3, b'{"question":"gout","sections":' + b"[" * DEEP + b"]" * DEEP + b"}"),
     -32700, 3),
    ("a string id", _call("call-4", b'{"question":"gout","k":' + b"1" * 5000 + b"}"), -32700, "call-4"),
    ("the id after a deep value", b'{"jsonrpc":"2.0","method":"tools/call","params":' + b"[" * 1000 + b"]" * 1000
     + b',"id":5}', -32700, 5),
    ("cut off mid-line", b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"sea', -32700, 6),
    ("not JSON at all", b"\x00\xff\xfe garbage", -32700, None),
    ("a JSON array (a batch)", b"[1,2,3]", -32600, None),
    ("method not a string", b'{"jsonrpc":"2.0","id":9,"method":5}', -32600, 9),
    ("no jsonrpc member", b'{"id":10,"method":"tools/list"}', -32600, 10),
    ("params not an object", b'{"jsonrpc":"2.0","id":11,"method":"tools/list","params":5}', -32600, 11),
    ("an id that is an object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', -32600, None),
    ("an id that is a fraction", b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', -32600, None),
    ("an id that is null", b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', -32600, None),
    ("a line over the limit", b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"x":"'
     + b"a" * MAX_LINE_BYTES + b'"}}', -32600, 13),
]


# JSON-RPC messages the SDK reads, but wrong for MCP (no tool name, an unknown tool, arguments as a string, an
# unknown method, a second initialize without its parameters, k of 1e400)
WELL_FORMED_BUT_WRONG = [
    b'{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{}}',
    b'{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"nope","arguments":{}}}',
    b'{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"search","arguments":"gout"}}',
    b'{"jsonrpc":"2.0","id":33,"method":"nope/nope"}',
    b'{"jsonrpc":"2.0","id":34,"method":"initialize","params":{}}',
    b'{"jsonrpc":"2.0","id":35,"method":"tools/call","params":{"name":"search","arguments":{"question":"gout",'
    b'"k":1e400}}}',
]


class _Lines:
    """The lines a subprocess writes to stdout, read in a thread so that every wait for one has a deadline."""

    def __init__(self, stream) -> None:
        self.lines: "queue.Queue[bytes]" = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in iter(stream.readline, b""):
            self.lines.put(line)
        self.lines.put(b"")

    def next(self, timeout_s: float) -> dict:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no reply within {timeout_s} s") from None
        assert line, "the server closed its stdout"
        return json.loads(line)


@pytest.fixture
def stdio_server(medretrieve_collection, tmp_path):
    log = open(tmp_path / "stderr.log", "wb")  # a file, not a pipe nobody drains (a full pipe would stall it)
    proc = subprocess.Popen([sys.executable, "-m", "medretrieve", "mcp", str(medretrieve_collection.directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=dict(os.environ))
    lines = _Lines(proc.stdout)

    def send(line: bytes) -> None:
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()

    send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "raw", "version": "1"}}}).encode())
    assert lines.next(START_S)["id"] == 0
    send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    try:
        yield proc, send, lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        log.close()


def test_every_broken_stdio_line_gets_a_json_rpc_error(stdio_server):
    proc, send, lines = stdio_server
    for name, line, code, request_id in BROKEN_LINES:
        t0 = time.monotonic()
        send(line)
        try:
            reply = lines.next(REPLY_S)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
        assert "error" in reply and reply["error"]["code"] == code, (name, reply)
        assert reply["id"] == request_id, (name, reply)
        assert time.monotonic() - t0 < REPLY_S
    for well_formed in WELL_FORMED_BUT_WRONG:  # the SDK's own replies: a result or an error, each with its id
        send(well_formed)
        reply = lines.next(REPLY_S)
        assert reply["id"] == json.loads(well_formed)["id"] and ("error" in reply or "result" in reply), reply
    send(b"")  # a blank line is no request: nothing comes back for it, and the next request is answered
    send(_call(20, b'{"question":"' + QUESTION.encode() + b'","k":2}'))
    found = lines.next(REPLY_S)
    assert found["id"] == 20 and not found["result"].get("isError"), found
    assert len(found["result"]["structuredContent"]["hits"]) == 2
    surrogate = next(line for name, line, _, _ in BROKEN_LINES if "surrogate" in name)
    send(surrogate)
    assert "half of an emoji" in lines.next(REPLY_S)["error"]["message"]  # says what to fix
    proc.stdin.close()  # the end of the input ends the server, cleanly
    assert proc.wait(REPLY_S) == 0


def test_every_broken_body_gets_a_json_rpc_error_over_http(medretrieve_collection):
    import httpx

    with mcp_http(medretrieve_collection.directory, start_s=START_S) as url:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        with httpx.Client(timeout=REPLY_S) as http:
            for name, body, code, request_id in BROKEN_LINES:  # answered as over stdio
                reply = http.post(url, content=body, headers=headers)
                assert reply.status_code == 400, (name, reply.status_code)
                error = reply.json()
                assert error["error"]["code"] == code and error["id"] == request_id, (name, error)
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "raw", "version": "1"}}}
            started = http.post(url, json=initialize, headers=headers)  # a good body still reaches the server
            assert started.status_code == 200 and "mcp-session-id" in started.headers


@settings(max_examples=200, deadline=None)
@given(request_id=st.one_of(st.integers(-2**62, 2**62), st.text(st.characters(exclude_categories=["Cs"]))),
       params=st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=20),
       id_first=st.booleans(), cut=st.integers(0, 40))
@example(request_id=1, params={"id": {"1": None}}, id_first=False, cut=1)  # an "id" key in params, before the id
def test_the_id_is_read_from_a_line_cut_anywhere_after_it(request_id, params, id_first, cut):
    members = [("id", request_id), ("params", params)] if id_first else [("params", params), ("id", request_id)]
    line = json.dumps({"jsonrpc": "2.0", "method": "tools/call", **dict(members)})
    assert readable_id(line) == request_id
    # The top-level id's member: right after the method, or the line's last one (params may hold "id" keys too).
    member = '"tools/call", "id": ' if id_first else '"id": '
    id_start = line.index(member) + len(member) if id_first else line.rindex(member) + len(member)
    id_end = id_start + len(json.dumps(request_id))
    broken = line[:id_end + cut] if id_end + cut < len(line) else line
    if id_end + cut < len(line) and broken[-1].isdigit() and isinstance(request_id, int):
        return  # a number cut mid-digits is another number
    assert readable_id(broken) == request_id  # whatever breaks after the id, the id is read


def test_the_id_scan_is_not_fooled_by_nested_ids_or_strings():
    assert readable_id('{"params": {"id": 7}, "x": "\\"id\\": 8", "id": 9') == 9
    assert readable_id('{"params": ' + "[" * 50_000) is None  # no id before the damage, no recursion error
    assert readable_id('[{"id": 1}]') is None and readable_id('{"id": 1.5}') is None


def test_lines_over_the_limit_are_cut_and_flagged():
    splitter = LineSplitter(limit=8)
    assert splitter.feed(b"abc\nabcdefghij") == [(b"abc", False)]
    assert splitter.feed(b"klm\n\nxy") == [(b"abcdefgh", True), (b"", False)]
    assert splitter.end() == [(b"xy", False)] and splitter.end() == []


# ------------------------------------------------------------------ answers bounded, cancelled, and never in the way

def _slow_stream_reply(_request):
    """A streamed answer that trickles a byte every 50 ms: an LLM that keeps writing for half an hour."""
    from llm_server import Trickle, stream_reply

    status, body, _, headers = stream_reply(["Metformin is first-line [1]. "] * 200)
    return status, Trickle(body, chunk=1, interval_s=0.05), 0.0, headers


async def _until(check, timeout_s: float, what: str) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)


def test_search_answers_within_its_deadline_while_40_answers_wait_and_cancelled_answers_stop(
        medretrieve_retriever):
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    waiting = 40
    with FakeLLMServer(_slow_stream_reply) as llm, OpenAIBackend(llm.base_url, "fake-model", timeout_s=30) as backend:
        engine = Engine(medretrieve_retriever, backend, deadline_ms=300, answer_deadline_ms=600_000,
                        answer_concurrency=waiting)

        async def work(client):
            answers = [asyncio.ensure_future(client.call_tool("answer", {"question": QUESTION, "k": 2}))
                       for _ in range(waiting)]
            await _until(lambda: len(llm.requests) >= waiting, 120, "40 answers waiting on the LLM")
            t0 = time.monotonic()
            found = await client.call_tool("search", {"question": QUESTION, "k": 3})
            search_s = time.monotonic() - t0
            t0 = time.monotonic()
            refused = await client.call_tool("answer", {"question": QUESTION, "k": 2})
            refused_s = time.monotonic() - t0
            for answer in answers:
                answer.cancel()
            await asyncio.gather(*answers, return_exceptions=True)
            await _until(lambda: engine.answer_slots.busy == 0, 30, "every slot given back")
            await _until(lambda: len(llm.dropped_at) >= waiting, 30, "every LLM request closed")
            return found, search_s, refused, refused_s

        try:
            found, search_s, refused, refused_s = asyncio.run(asyncio.wait_for(_session(engine, work), 300))
        finally:
            engine.close()
    assert not found.is_error and len(found.structured_content["hits"]) == 3
    assert search_s < 3.0, f"the search took {search_s:.1f} s behind 40 answers (deadline 300 ms)"
    assert refused.is_error and "40 answers are being written" in refused.content[0].text
    assert "--answer-concurrency" in refused.content[0].text and refused_s < 3.0
    assert len(llm.dropped_at) == waiting  # every cancelled answer closed its LLM request


async def _session(server_or_engine, work):
    target = build_server(server_or_engine) if isinstance(server_or_engine, Engine) else server_or_engine
    async with Client(target, read_timeout_seconds=120) as client:
        return await work(client)


def test_a_cancelled_answer_frees_its_slot_for_the_next(medretrieve_retriever):
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    with FakeLLMServer(_slow_stream_reply) as llm, OpenAIBackend(llm.base_url, "fake-model", timeout_s=30) as backend:
        engine = Engine(medretrieve_retriever, backend, answer_deadline_ms=600_000, answer_concurrency=1)

        async def work(client):
            first = asyncio.ensure_future(client.call_tool("answer", {"question": QUESTION, "k": 2}))
            await _until(lambda: len(llm.requests) == 1, 60, "the answer waiting on the LLM")
            busy = await client.call_tool("answer", {"question": QUESTION, "k": 2})
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            await _until(lambda: engine.answer_slots.busy == 0, 30, "the slot given back")
            second = asyncio.ensure_future(client.call_tool("answer", {"question": QUESTION, "k": 2}))
            await _until(lambda: len(llm.requests) == 2, 60, "the next answer taken")
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
            return busy

        try:
            busy = asyncio.run(asyncio.wait_for(_session(engine, work), 300))
        finally:
            engine.close()
    assert busy.is_error and "1 answers are being written" in busy.content[0].text


def test_closing_the_engine_stops_the_answers_at_work(medretrieve_retriever):
    """The server's end (stdin closed) closes the LLM requests of the answers still at work: the process's exit
    waits for their threads."""
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    with FakeLLMServer(_slow_stream_reply) as llm, OpenAIBackend(llm.base_url, "fake-model", timeout_s=30) as backend:
        engine = Engine(medretrieve_retriever, backend, answer_deadline_ms=600_000)

        async def work(client):
            answer = asyncio.ensure_future(client.call_tool("answer", {"question": QUESTION, "k": 2}))
            await _until(lambda: len(llm.requests) == 1, 60, "the answer waiting on the LLM")
            engine.close()
            await _until(lambda: len(llm.dropped_at) == 1, 30, "the LLM request closed")
            return await asyncio.wait_for(answer, 30)

        stopped = asyncio.run(asyncio.wait_for(_session(engine, work), 300))
    assert "cancelled" in stopped.structured_content["error"]
    assert engine.answer_slots.busy == 0


def test_over_a_url_an_answer_may_take_as_long_as_its_deadline(medretrieve_collection):
    """A server whose LLM takes 11 s: answered (before, every answer past the client's 10 s failed)."""
    pytest.importorskip("fastapi")
    from llm_server import FakeLLMServer, chat_reply, stream_reply

    from medretrieve.testing.server import ServerProcess

    def slow(request_json):
        if request_json and request_json.get("stream"):
            return (*stream_reply(["Metformin is the first-line drug for type 2 diabetes ", "[1]."])[:2], 11.0,
                    {"Content-Type": "text/event-stream"})
        return 200, chat_reply("Metformin is the first-line drug for type 2 diabetes [1]."), 11.0

    with FakeLLMServer(slow) as llm, \
            ServerProcess(medretrieve_collection.directory, ["--llm", llm.base_url, "--model", "fake-model"]) as srv:
        engine = Engine(srv.url, answer_deadline_ms=30_000)
        try:
            t0 = time.monotonic()
            answered = engine.answer(QUESTION, 2)
        finally:
            engine.close()
    assert answered.error is None and answered.text.startswith("Metformin")
    assert 11.0 <= time.monotonic() - t0 < 30.0
