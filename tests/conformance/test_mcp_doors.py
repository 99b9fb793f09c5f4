"""The MCP doors answer a request as ``Retriever.search`` does: the ``search`` tool of ``medretrieve mcp``, through
the official SDK's own client, over stdio (a real subprocess) and over streamable HTTP (``--http``), gives the same
hits, scores and stage log, or refuses with a tool error naming the same option.

The tool's arguments are the body of ``POST /v1/search`` (stage switches under ``stages``), so a request goes to it
as JSON, as an agent sends it; a request JSON cannot write (NaN) is not asked. A tool error carries no Python type:
it is compared as a refusal naming the option, as an HTTP 422 is.

The ``answer`` tool answers as ``Answerer.answer`` does (answers.py): the same sources (every one read, with
``all_sources``), text and citations for the same ``k`` and filter options, or a tool error naming the option."""
from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import threading
from concurrent.futures import Future
from typing import Any, Dict, Iterator, Optional

import pytest

from mcp_process import mcp_http

from .answers import Answered, InProcessAnswers, check_answer_door
from .doors import Outcome, Request, ThroughPage
from .drawing import check_door, compared_or_fail

pytest.importorskip("mcp")

TIMEOUT_S = 120.0  # the longest wait for a session to open or a tool call to answer
_FIELD = re.compile(r"Error executing tool \w+: ([\w.]+):")


def tool_arguments(request: Request) -> Optional[Dict[str, Any]]:
    """The ``search`` tool's arguments for ``request`` (JSON values; stage switches under ``stages``), or None
    when JSON cannot write it."""
    body = ThroughPage.body(request)  # the POST /v1/search body, whose fields the tool takes but explain
    if body is None:
        return None
    arguments: Dict[str, Any] = json.loads(body)
    del arguments["explain"]
    return arguments


def named_option(message: str) -> Optional[str]:
    """The option a tool error names: its first field (``k``; ``stages.mmr`` -> ``mmr``; ``sections.0`` ->
    ``sections``; ``stages`` for the rule over dense and bm25)."""
    found = _FIELD.search(message)
    if found is None:
        return None
    parts = found.group(1).split(".")
    return parts[0] if parts[-1].isdigit() else parts[-1]


class ThroughMcp:
    """The ``search`` tool through the SDK's ``Client`` on ``target`` (stdio parameters or an HTTP URL), in one
    session held open on an event loop of its own thread for all the requests."""

    def __init__(self, name: str, target: Any) -> None:
        from mcp import Client

        self.name = name
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"mcp-door-{name}", daemon=True)
        self.thread.start()
        opened: "Future[Any]" = Future()
        stop = asyncio.Event()

        async def hold() -> None:  # the session is entered and left in this one task (anyio's rule)
            try:
                async with Client(target, read_timeout_seconds=60) as client:
                    opened.set_result(client)
                    await stop.wait()
            except BaseException as exc:
                if not opened.done():
                    opened.set_exception(exc)
                raise

        self._stop = stop
        self._session = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        self.client = opened.result(TIMEOUT_S)

    def call(self, tool: str, arguments: Dict[str, Any]) -> Any:
        """The tool's result (``is_error``, ``content``, ``structured_content``)."""
        return asyncio.run_coroutine_threadsafe(self.client.call_tool(tool, arguments), self.loop).result(TIMEOUT_S)

    def search(self, request: Request) -> Outcome:
        arguments = tool_arguments(request)
        assert arguments is not None, f"JSON cannot write {request}"
        result = self.call("search", arguments)
        if result.is_error:
            return Outcome(refused="http", option=named_option(result.content[0].text))
        out = result.structured_content
        return Outcome([(h["chunk_id"], h["score"]) for h in out["hits"]],
                       [(s["name"], s["ran"]) for s in out["stages"]], cut=list(out["cut"]))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self._session.result(TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(TIMEOUT_S)
            self.loop.close()


class McpAnswers:
    """The ``answer`` tool in a :class:`ThroughMcp`'s session, with every source read (``all_sources``)."""

    def __init__(self, door: ThroughMcp) -> None:
        self.name = f"{door.name}: answer"
        self.door = door

    def answer(self, request: Request) -> Answered:
        result = self.door.call("answer", {"question": request.question, **request.options, "all_sources": True})
        if result.is_error:
            return Answered.refused(Outcome(refused="http", option=named_option(result.content[0].text)))
        out = result.structured_content
        return Answered([(s["chunk_id"], s["score"]) for s in out["sources"]], out["text"], out["abstained"],
                        [c["sources"] for c in out["citations"]])


@pytest.fixture(scope="module")
def mcp_stdio_door(demo_collection_dir) -> Iterator[ThroughMcp]:
    from mcp.client.stdio import StdioServerParameters

    door = ThroughMcp("MCP over stdio", StdioServerParameters(
        command=sys.executable, args=["-m", "medretrieve", "mcp", str(demo_collection_dir)], env=dict(os.environ)))
    yield door
    door.close()


@pytest.fixture(scope="module")
def mcp_http_door(demo_collection_dir) -> Iterator[ThroughMcp]:
    pytest.importorskip("uvicorn")
    with mcp_http(demo_collection_dir, start_s=TIMEOUT_S) as url:
        door = ThroughMcp("MCP over --http", url)
        yield door
        door.close()


@pytest.mark.parametrize("door_fixture", ["mcp_stdio_door", "mcp_http_door"])
def test_every_mcp_door_answers_as_retriever_search(request, door_fixture, in_process, conformance_questions):
    # JSON cannot write a NaN: no agent can send it
    check_door(in_process, request.getfixturevalue(door_fixture), conformance_questions,
               sendable=lambda req: tool_arguments(req) is not None)


@pytest.mark.parametrize("options", [{}, {"section": ["diagnosis"]}, {"k": "5"}, {"k": True}, {"lexical": False},
                                     {"sections": ["treatment"], "mmr": True}])
def test_the_mcp_door_answers_the_issues_requests(mcp_stdio_door, in_process, options):
    """The requests issue 42 names: ``{"section": [...]}`` was dropped (five Treatment hits came back), ``"5"`` and
    true were taken as counts."""
    compared_or_fail(in_process, mcp_stdio_door, Request("Which drugs lower serum urate in gout?", options))


def test_the_mcp_answer_tool_answers_as_answerer(mcp_stdio_door, in_process, conformance_questions):
    check_answer_door(InProcessAnswers(in_process.retriever), McpAnswers(mcp_stdio_door), conformance_questions)


def test_named_option_reads_the_tool_errors():
    assert named_option("Error executing tool search: k: Input should be a valid integer (the arguments: ...)") == "k"
    assert named_option("Error executing tool search: stages.mmr: Input should be a valid boolean") == "mmr"
    assert named_option("Error executing tool search: sections.0: Input should be 'treatment'") == "sections"
    assert named_option("Error executing tool search: section: unknown argument (the arguments: ...)") == "section"
    assert named_option("Error executing tool answer: where: unknown field 'yeer'") == "where"
    assert named_option("something else") is None
