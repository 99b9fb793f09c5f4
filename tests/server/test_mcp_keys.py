"""``medretrieve mcp --http`` takes the same API keys as ``medretrieve serve``: the MCP endpoint needs a key with
``search``, the ``answer`` tool one with ``answer`` too; without a key it refuses to listen beyond loopback.
A real process, asked by the official MCP SDK's client with and without a key."""
from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("mcp")
pytest.importorskip("uvicorn")
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client  # noqa: E402
from mcp_process import mcp_http  # noqa: E402

from medretrieve.cli import main  # noqa: E402

SEARCH_KEY = "mcp-search-key-0123456789abcdef"
BOTH_KEY = "mcp-both-scopes-key-0123456789ab"
QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def keyed_mcp(medretrieve_collection, tmp_path_factory):
    """``medretrieve mcp COLLECTION --http`` with keys from a file; yields its /mcp URL."""
    keys = tmp_path_factory.mktemp("mcp-keys") / "keys.txt"
    keys.write_text(f"{SEARCH_KEY} search\n{BOTH_KEY} search,answer\n", encoding="utf-8")
    with mcp_http(medretrieve_collection.directory, "--api-key-file", str(keys), start_s=TIMEOUT_S) as url:
        yield url


def _calls(url, key):
    """Search, then answer, over one MCP session with ``key`` as the bearer token."""

    async def go():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with http, Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
            found = await client.call_tool("search", {"question": QUESTION, "k": 2})
            try:
                answered = await client.call_tool("answer", {"question": QUESTION, "k": 2})
            except Exception as exc:  # the SDK's error for the HTTP refusal
                answered = exc
            return found, answered

    return asyncio.run(asyncio.wait_for(go(), TIMEOUT_S))


def test_a_key_with_both_scopes_calls_both_tools(keyed_mcp):
    found, answered = _calls(keyed_mcp, BOTH_KEY)
    assert [h["number"] for h in found.structured_content["hits"]] == [1, 2]
    assert answered.structured_content["citations"]


def test_a_search_key_searches_but_may_not_answer(keyed_mcp):
    found, answered = _calls(keyed_mcp, SEARCH_KEY)
    assert found.structured_content["hits"]
    assert isinstance(answered, Exception) or answered.is_error, answered
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "answer", "arguments": {}}}
    reply = httpx.post(keyed_mcp, json=body, headers={"Authorization": f"Bearer {SEARCH_KEY}",
                                                      "Accept": "application/json, text/event-stream"})
    assert reply.status_code == 403 and reply.json()["error"]["type"] == "insufficient_scope"
    assert "'answer' scope" in reply.json()["error"]["message"]


def test_without_a_key_nothing_is_served(keyed_mcp):
    for headers in ({}, {"Authorization": "Bearer not-a-key-0123456789abcdef"}):
        reply = httpx.post(keyed_mcp, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                           headers={**headers, "Accept": "application/json, text/event-stream"})
        assert reply.status_code == 401 and reply.json()["error"]["type"] == "unauthorized"
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("args,message", [
    (["--http", "--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without an API key"),
    (["--api-key-file", "keys.txt"], "--api-key-file goes with --http"),
])
def test_mcp_refuses_to_listen_beyond_loopback_without_a_key(medretrieve_collection, capsys, args, message):
    assert main(["mcp", str(medretrieve_collection.directory), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medretrieve mcp: ") and message in err
