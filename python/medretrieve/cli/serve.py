"""``medretrieve serve``: the HTTP API over one collection, under uvicorn (one or several worker processes); in a
browser, ``/`` is a search page and ``/docs`` the API's documentation (both offline).

Several workers: each is its own process with its own retriever (searches are CPU-bound and hold the GIL part of
the time, so processes, not threads, use several cores); they share the dense index's pages through the memory
map, their Prometheus metrics through a shared directory, and a reload through a stamp file (both in a temporary
directory removed at exit). A worker loads its collection before it accepts connections, so a worker that is
still loading (at start, or restarted) never answers 503 while the others serve. SIGTERM stops accepting, lets
the requests in flight finish (at most ``--graceful-timeout`` s; requests whose body is still arriving are dropped
at once) and exits 0.

Slow or hostile clients: a body over ``--max-body-bytes`` is refused unread (413), headers and body must arrive
within ``--header-timeout-s`` / ``--body-timeout-s`` (408), and a worker holds at most ``--max-connections``
(:mod:`medretrieve.server.limits`, :mod:`medretrieve.server.protocol`).

Who may call: ``--api-key-file`` (or the ``MEDRETRIEVE_API_KEYS`` environment variable) gives the API keys and
their scopes (:mod:`medretrieve.server.keys`); with keys, every endpoint but health, readiness and the pages asks
for one. ``--ssl-certfile`` / ``--ssl-keyfile`` serve HTTPS. ``--cors-origin`` lets pages of the named origins call
the API from a browser (none by default). Listening beyond loopback without a key is refused unless
``--insecure`` says the operator means it (a proxy in front checks callers, say).
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import signal
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from ..wire import DEFAULT_DEADLINE_MS
from .options import RANKER_HELP, HelpFormatter, ranker_arg

if TYPE_CHECKING:  # the server needs the serve extra: imported when the command runs, so --help works without it
    from ..server.config import ServerConfig

DEFAULT_PORT = 8000
# uvicorn's httptools protocol with header deadlines and a connection cap (medretrieve.server.protocol)
PROTOCOL = "medretrieve.server.protocol:GuardedHttpToolsProtocol"


def add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a collection over HTTP (search, answer, metrics, a search page)",
                       description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free port; the log names it)")
    p.add_argument("--workers", type=_positive, default=1, help="worker processes")
    p.add_argument("--ranker", type=ranker_arg, default="default", help=RANKER_HELP)
    p.add_argument("--cross-encoder", default=None, help="cross-encoder model directory")
    p.add_argument("--query-encoder", default=None, help="query encoder directory replacing the collection's")
    p.add_argument("--training", nargs="*", default=None, help="BioASQ golden files for training-memory expansion")
    p.add_argument("--llm", default=None, metavar="BASE_URL",
                   help="OpenAI-compatible API root for /v1/answer (without: extractive answers)")
    p.add_argument("--model", default=None, help="LLM model name (with --llm)")
    p.add_argument("--llm-timeout-s", type=float, default=30.0, help="per LLM request (s)")
    p.add_argument("--max-inflight", type=_positive, default=None,
                   help="searches working at once per worker (default: the CPUs this process may use)")
    p.add_argument("--max-queue", type=int, default=None,
                   help="requests that may wait for a slot per worker (default: 4 x --max-inflight); beyond, 429")
    p.add_argument("--encoder-threads", type=_positive, default=1,
                   help="ONNX Runtime threads per encoder call (searches already run side by side)")
    p.add_argument("--answer-concurrency", type=_positive, default=8, help="answers generated at once per worker")
    p.add_argument("--deadline-ms", type=float, default=DEFAULT_DEADLINE_MS,
                   help="deadline of a search that names none (ms)")
    p.add_argument("--max-batch", type=_positive, default=64, help="most questions in one /v1/search:batch")
    p.add_argument("--enable-reload", action="store_true", help="allow POST /v1/admin/reload")
    p.add_argument("--max-body-bytes", type=_positive, default=None,
                   help="largest request body (bytes; default 1 MiB); a larger one is refused with 413 unread")
    p.add_argument("--body-timeout-s", type=_seconds, default=10.0,
                   help="a request's whole body must arrive within this, from the end of its headers (s), else 408")
    p.add_argument("--header-timeout-s", type=_seconds, default=10.0,
                   help="a request's headers must arrive within this, from its first byte (s), else 408")
    p.add_argument("--max-connections", type=_positive, default=1000,
                   help="open connections per worker; one more is answered 503 and closed")
    p.add_argument("--keep-alive-s", type=_positive, default=5,
                   help="an idle kept-alive connection is closed after this (s)")
    p.add_argument("--graceful-timeout", type=float, default=30.0,
                   help="at shutdown, the longest wait for requests in flight (s)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="API keys, one a line with its scopes (search, answer, admin), e.g. 'KEY search,answer'; "
                   "also read from $MEDRETRIEVE_API_KEYS. Without keys anyone who reaches the server may call it")
    p.add_argument("--insecure", action="store_true",
                   help="allow listening beyond loopback (--host 0.0.0.0) without an API key")
    p.add_argument("--ssl-certfile", default=None, metavar="PEM", help="serve HTTPS with this certificate (chain)")
    p.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="the certificate's private key (HTTPS)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="an origin (https://app.example.org) whose pages may call the API from a browser; repeat "
                   "for several (default: none, CORS closed)")
    p.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="server log level")
    p.set_defaults(func=_serve)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve to any interface
        return False


def check_exposure(command: str, host: str, keyed: bool, insecure: bool) -> None:
    """ValueError (exit 2) when ``command`` would listen beyond loopback without API keys and without
    ``--insecure``: anyone on the network could search, spend the LLM budget and reload."""
    if not keyed and not insecure and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without an API key: anyone who can reach it could call it. "
                         f"Give keys (--api-key-file FILE, or $MEDRETRIEVE_API_KEYS), listen on 127.0.0.1, or pass "
                         f"--insecure if something in front of {command} checks callers")


def api_keys(args: argparse.Namespace) -> tuple:
    """The keys of ``--api-key-file`` and ``$MEDRETRIEVE_API_KEYS`` together (digests and scopes)."""
    from ..server.keys import keys_from_env, read_key_file

    keys = keys_from_env() + (read_key_file(args.api_key_file) if args.api_key_file else ())
    digests = [digest for digest, _ in keys]
    if len(set(digests)) != len(digests):
        raise ValueError("the same API key is in --api-key-file and in $MEDRETRIEVE_API_KEYS: list it once")
    return keys


def _tls(args: argparse.Namespace) -> dict:
    """uvicorn's certificate settings (none: plain HTTP); ValueError when one half is missing."""
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        raise ValueError("--ssl-certfile and --ssl-keyfile go together: give both (HTTPS) or neither")
    if args.ssl_certfile is None:
        return {}
    for option, path in (("--ssl-certfile", args.ssl_certfile), ("--ssl-keyfile", args.ssl_keyfile)):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{option} {path}: no such file")
    return {"ssl_certfile": args.ssl_certfile, "ssl_keyfile": args.ssl_keyfile}


def _config(args: argparse.Namespace, runtime_dir: str, failure_file: str) -> "ServerConfig":
    from ..server.config import ServerConfig

    extra = {} if args.max_inflight is None else {"max_inflight": args.max_inflight}  # default: the CPUs
    if args.max_body_bytes is not None:
        extra["max_body_bytes"] = args.max_body_bytes
    return ServerConfig(
        os.path.abspath(args.collection), ranker=args.ranker, cross_encoder=args.cross_encoder,
        query_encoder=args.query_encoder, training=tuple(args.training) if args.training else None,
        llm_url=args.llm, llm_model=args.model, llm_timeout_s=args.llm_timeout_s,
        answer_concurrency=args.answer_concurrency, deadline_ms=args.deadline_ms, max_batch=args.max_batch,
        max_queue=args.max_queue, encoder_threads=args.encoder_threads, preload=True,
        startup_failure_file=failure_file, body_timeout_s=args.body_timeout_s,
        header_timeout_s=args.header_timeout_s, max_connections=args.max_connections,
        enable_reload=args.enable_reload, api_keys=api_keys(args), cors_origins=tuple(args.cors_origin),
        reload_stamp=os.path.join(runtime_dir, "reload-stamp") if args.enable_reload and args.workers > 1 else None,
        **extra)


def _log_config(level: str) -> dict:
    """uvicorn's logging setup plus the ``medretrieve`` logger (collection loads, reloads, internal errors)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["medretrieve"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..server.config import CONFIG_ENV

    runtime_dir = tempfile.mkdtemp(prefix="medretrieve-serve-")
    failure = os.path.join(runtime_dir, "startup-failure")
    try:
        config = _config(args, runtime_dir, failure)
        config.check_paths()
        check_exposure("medretrieve serve", args.host, bool(config.api_keys), args.insecure)
        tls = _tls(args)
        if config.api_keys and not tls and not is_loopback(args.host):
            print("medretrieve serve: warning: API keys over plain HTTP can be read by anyone on the network path; "
                  "serve HTTPS (--ssl-certfile, --ssl-keyfile) or put a TLS proxy in front", file=sys.stderr)
        os.environ[CONFIG_ENV] = config.to_json()
        if args.workers > 1:
            metrics_dir = os.path.join(runtime_dir, "metrics")
            os.mkdir(metrics_dir)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler it found; this
        # one lets the command return, so the process exits 0 rather than by the signal
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        try:
            uvicorn.run("medretrieve.server.app:app_from_env", factory=True, host=args.host, port=args.port,
                        workers=args.workers, log_level=args.log_level, access_log=args.access_log,
                        log_config=_log_config(args.log_level), timeout_graceful_shutdown=args.graceful_timeout,
                        timeout_keep_alive=args.keep_alive_s, http=PROTOCOL, lifespan="on", **tls)
        except SystemExit:  # one worker that failed to start exits this way; several stop without a code
            if not os.path.exists(failure):
                raise
        if os.path.exists(failure):
            with open(failure, encoding="utf-8") as fh:
                raise RuntimeError(f"could not load {config.collection}: {fh.read()}")
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)
    return 0
