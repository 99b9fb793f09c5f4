"""``medretrieve mcp``: a collection (or a medretrieve server) as MCP tools for agents, over stdio or HTTP."""
from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from .options import HelpFormatter, deadline
from .serve import _positive  # the same check as serve's --answer-concurrency


def add_mcp(sub: Any) -> None:
    p = sub.add_parser(
        "mcp", help="serve a collection as MCP tools (search, answer) for agents, over stdio or streamable HTTP",
        description="An MCP server (the official Python SDK; the 'mcp' extra) with two read-only tools: search "
        "(question, k, sections: the best passages with their sources) and answer (question, k: an answer citing "
        "them as [n], each citation checked; written by --llm, extractive without it). Over stdio by default "
        "(an MCP client starts this command), over streamable HTTP at /mcp with --http.",
        formatter_class=HelpFormatter)
    p.add_argument("collection", metavar="COLLECTION",
                   help="collection folder (medretrieve build), or the URL of a medretrieve serve process")
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (with medretrieve serve's "
                   "limits on slow clients and connections: the serve extra)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on with --http")
    p.add_argument("--port", type=int, default=8765, help="port with --http (0: any free port; the log names it)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="with --http: API keys as for medretrieve serve (also $MEDRETRIEVE_API_KEYS); /mcp then "
                   "needs a key with the search scope, and the answer tool one with answer too")
    p.add_argument("--insecure", action="store_true",
                   help="with --http: allow listening beyond loopback (--host 0.0.0.0) without an API key")
    p.add_argument("--llm", default=None, metavar="BASE_URL",
                   help="OpenAI-compatible API root that writes answers (default: extractive answers)")
    p.add_argument("--model", default=None, help="model name the LLM server knows (with --llm)")
    p.add_argument("--llm-timeout-s", type=float, default=60.0, help="per LLM request (s)")
    p.add_argument("--k", type=_hit_count, default=10, help="hits a tool call returns when it names no k (1-100)")
    p.add_argument("--deadline-ms", type=deadline, default=300.0, help="budget of one search (ms, or 'none')")
    p.add_argument("--answer-deadline-ms", type=deadline, default=60_000.0,
                   help="budget of one answer, retrieval and generation (ms, or 'none'); over a server URL, also "
                   "how long the server's answer is waited for")
    p.add_argument("--answer-concurrency", type=_positive, default=8,
                   help="answers written at once; one more is refused at once with a tool error that says so")
    p.set_defaults(func=_mcp)


def _hit_count(text: str) -> int:
    from ..wire import MAX_K

    value = int(text)
    if not 1 <= value <= MAX_K:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_K}], got {text!r}")
    return value


def _mcp(args: Any) -> int:
    from ..integrations.mcp_server import Engine, build_server

    if (args.llm is None) != (args.model is None):
        raise ValueError("--llm and --model go together")
    if args.api_key_file and not args.http:
        raise ValueError("--api-key-file goes with --http (over stdio the MCP client starts this process itself)")
    keys: tuple = ()
    if args.http:  # checked before the collection loads
        from .serve import api_keys, check_exposure

        keys = api_keys(args)
        check_exposure("medretrieve mcp", args.host, bool(keys), args.insecure)
    with contextlib.ExitStack() as stack:
        backend = None
        if args.llm is not None:
            from ..generation.llm import OpenAIBackend

            backend = stack.enter_context(OpenAIBackend(args.llm, args.model, timeout_s=args.llm_timeout_s))
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol: loading must not print there
            engine = Engine(args.collection, backend, deadline_ms=args.deadline_ms,
                            answer_deadline_ms=args.answer_deadline_ms, answer_concurrency=args.answer_concurrency)
        stack.callback(engine.close)
        server = build_server(engine, default_k=args.k)
        if not args.http:
            server.run("stdio")
            return 0
        import uvicorn

        from .serve import PROTOCOL  # medretrieve serve's header deadline and connection cap (slow clients)

        try:
            import medretrieve.server.protocol  # noqa: F401  (uvicorn loads it by name: fail here, clearly)
        except ImportError as exc:
            raise ImportError('medretrieve mcp --http needs the serve extra too: pip install '
                              '"medretrieve[mcp,serve]"') from exc

        print("medretrieve mcp: streamable HTTP at path /mcp of the address uvicorn names below", file=sys.stderr)
        app: Any = server.streamable_http_app(host=args.host)
        if keys:
            from ..server.auth import RequireMcpKey
            from ..server.keys import KeyRing

            app = RequireMcpKey(app, KeyRing(keys))
        uvicorn.run(app, host=args.host, port=args.port, log_level="info", http=PROTOCOL)
    return 0
