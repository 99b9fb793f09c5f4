"""Who may call the service: which request needs which key scope (:func:`required_scope`), the middleware that
refuses the others (:class:`RequireKey`) and the bearer scheme in the OpenAPI document. The keys themselves,
their file format and the constant-time lookup: :mod:`.keys`.

Keys are sent as ``Authorization: Bearer <key>``. Scopes: ``search`` (``/v1/search``, ``/v1/search:batch``),
``answer`` (``/v1/answer``), ``admin`` (``/v1/admin/*``); any key opens ``/metrics`` and ``/v1/collection``;
``/healthz``, ``/readyz``, the search page and the API documentation stay open (a probe or a browser must reach
them before it holds a key). A refusal is 401 ``unauthorized`` (no key, a malformed header or an unknown key;
``WWW-Authenticate: Bearer``) or 403 ``insufficient_scope`` (a known key without the route's scope), in the
API's JSON error shape, before the request's body is read.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response
from .keys import SCOPES, KeyRing

SECURITY_SCHEME = "apiKey"  # its name in the OpenAPI document
ANY_KEY = ""  # the "scope" of routes any valid key opens


def required_scope(path: str) -> Optional[str]:
    """The scope a request path needs: a name of :data:`SCOPES`, :data:`ANY_KEY`, or None (open)."""
    if path.startswith("/v1/search") or path == "/v1/facets":  # facets count what a search may read
        return "search"
    if path == "/v1/answer":
        return "answer"
    if path.startswith("/v1/admin/"):
        return "admin"
    if path.startswith("/v1/") or path == "/metrics":
        return ANY_KEY
    return None


def _challenge(error: Optional[str] = None, scope: Optional[str] = None) -> Dict[str, str]:
    value = 'Bearer realm="medretrieve"'
    if error:
        value += f', error="{error}"'
    if scope:
        value += f', scope="{scope}"'
    return {"WWW-Authenticate": value}


def _bearer(scope: Scope) -> Optional[bytes]:
    """The token of the request's ``Authorization: Bearer`` header (None when there is none, it is another
    scheme, or there are several: a proxy in front may have read another one than this server would)."""
    values = [value for name, value in scope.get("headers", ()) if name == b"authorization"]
    if len(values) != 1:
        return None
    kind, _, token = values[0].partition(b" ")
    return token.strip() if kind.lower() == b"bearer" and token.strip() else None


class RequireKey:
    """Pure ASGI middleware: a request to a path that needs a key (``scope_of``: :func:`required_scope` for the
    HTTP API) passes only with a key that has its scope; others are answered 401 / 403 (module docstring) before
    their body is read."""

    def __init__(self, app: ASGIApp, keys: KeyRing,
                 scope_of: Callable[[str], Optional[str]] = required_scope) -> None:
        self.app = app
        self.keys = keys
        self.scope_of = scope_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):  # mounted under a prefix: the app's own path
            path = path[len(root):]
        needed = self.scope_of(path)
        if needed is None:
            await self.app(scope, receive, send)
            return
        refusal, scopes = self._check(scope, needed)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.let_in(scope, receive, send, scopes)

    async def let_in(self, scope: Scope, receive: Receive, send: Send, scopes: FrozenSet[str]) -> None:
        """Pass a request whose key has the path's scope (``scopes``: all of the key's) on to the app."""
        await self.app(scope, receive, send)

    def _check(self, scope: Scope, needed: str) -> Tuple[Any, FrozenSet[str]]:
        """The refusal of a request (None: let in) and its key's scopes."""
        token = _bearer(scope)
        if token is None:
            return error_response(401, "unauthorized", "this server needs an API key: send the header "
                                  "'Authorization: Bearer <key>'", headers=_challenge()), frozenset()
        scopes = self.keys.scopes_of(token)
        if scopes is None:
            return error_response(401, "unauthorized", "the API key is not one this server accepts",
                                  headers=_challenge("invalid_token")), frozenset()
        if needed and needed not in scopes:
            return scope_refusal(needed, scopes), scopes
        return None, scopes


def scope_refusal(needed: str, scopes: FrozenSet[str]) -> Any:
    """The 403 ``insufficient_scope`` response of a key (``scopes``) without ``needed``."""
    return error_response(403, "insufficient_scope", f"this API key lacks the '{needed}' scope (it has: "
                          f"{', '.join(sorted(scopes))})", headers=_challenge("insufficient_scope", needed))


MCP_PATH = "/mcp"
MAX_MCP_BODY_BYTES = 1 << 20  # an MCP request (a tool call's question and options) is a few kB


def mcp_scope(path: str) -> Optional[str]:
    """The scope ``medretrieve mcp --http`` asks of a path: ``search`` for the MCP endpoint (the ``answer``
    tool's calls need ``answer`` too: :class:`RequireMcpKey`), None elsewhere."""
    return "search" if path == MCP_PATH or path.startswith(MCP_PATH + "/") else None


def _tools_called(body: bytes) -> List[str]:
    """The tool names of the JSON-RPC ``tools/call`` requests in ``body`` (one request or a batch); [] when it is
    not JSON (the MCP server answers that itself)."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    calls = data if isinstance(data, list) else [data]
    return [str(c.get("params", {}).get("name")) for c in calls
            if isinstance(c, dict) and c.get("method") == "tools/call" and isinstance(c.get("params"), dict)]


class RequireMcpKey(RequireKey):
    """:class:`RequireKey` for ``medretrieve mcp --http``: the MCP endpoint needs a key with ``search``, and a
    call of the ``answer`` tool (which spends the LLM's budget) a key with ``answer`` as well: the body of a
    request whose key lacks it is read (at most :data:`MAX_MCP_BODY_BYTES`, else 413) and refused 403 when it
    calls ``answer``, else handed on unchanged."""

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        super().__init__(app, keys, mcp_scope)

    async def let_in(self, scope: Scope, receive: Receive, send: Send, scopes: FrozenSet[str]) -> None:
        if "answer" in scopes or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: List[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > MAX_MCP_BODY_BYTES:
                await error_response(413, "body_too_large", f"an MCP request is at most {MAX_MCP_BODY_BYTES} "
                                     "bytes")(scope, receive, send)
                return
        body = b"".join(chunks)
        if "answer" in _tools_called(body):
            await scope_refusal("answer", scopes)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def document_security(app: Any, error_model: Any) -> None:
    """Declare the bearer key in ``app``'s OpenAPI document: the security scheme, each guarded operation's
    ``security`` and its 401 / 403 answers (``error_model``'s schema), so generated clients and fuzzers know."""
    make: Callable[[], Dict[str, Any]] = app.openapi

    def openapi() -> Dict[str, Any]:
        if app.openapi_schema is None:
            spec = make()
            components = spec.setdefault("components", {})
            components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
                "type": "http", "scheme": "bearer",
                "description": f"an API key of this server, with the operation's scope ({', '.join(SCOPES)})"}
            schema_ref = {"$ref": f"#/components/schemas/{error_model.__name__}"}
            ref = {"content": {"application/json": {"schema": schema_ref}}}
            schemas = components.setdefault("schemas", {})
            if error_model.__name__ not in schemas:
                schema = error_model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schemas[error_model.__name__] = schema
            for path, operations in spec.get("paths", {}).items():
                needed = required_scope(path)
                if needed is None:
                    continue
                for operation in operations.values():
                    operation["security"] = [{SECURITY_SCHEME: [needed] if needed else []}]
                    answers = operation.setdefault("responses", {})
                    answers.setdefault("401", {"description": "no API key, or one this server does not accept "
                                                              "(unauthorized)", **ref})
                    lacking = "the API key lacks this operation's scope (insufficient_scope)"
                    if "403" in answers:  # the route's own 403 too (reload_disabled)
                        answers["403"]["description"] += f"; or {lacking}"
                    else:
                        answers["403"] = {"description": lacking, **ref}
        return app.openapi_schema or make()

    app.openapi = openapi
