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

from typing import Any, Callable, Dict, Optional

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response
from .keys import SCOPES, KeyRing

SECURITY_SCHEME = "apiKey"  # its name in the OpenAPI document
ANY_KEY = ""  # the "scope" of routes any valid key opens


def required_scope(path: str) -> Optional[str]:
    """The scope a request path needs: a name of :data:`SCOPES`, :data:`ANY_KEY`, or None (open)."""
    if path.startswith("/v1/search"):
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
    """The token of the request's ``Authorization: Bearer`` header (None when there is none or it is another
    scheme)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            kind, _, token = value.partition(b" ")
            return token.strip() if kind.lower() == b"bearer" and token.strip() else None
    return None


class RequireKey:
    """Pure ASGI middleware: a request to a path that needs a key (:func:`required_scope`) passes only with a
    key that has its scope; others are answered 401 / 403 (module docstring) before their body is read."""

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):  # mounted under a prefix: the app's own path
            path = path[len(root):]
        needed = required_scope(path)
        if needed is not None:
            refusal = self._refusal(scope, needed)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope, needed: str) -> Any:
        token = _bearer(scope)
        if token is None:
            return error_response(401, "unauthorized", "this server needs an API key: send the header "
                                  "'Authorization: Bearer <key>'", headers=_challenge())
        scopes = self.keys.scopes_of(token)
        if scopes is None:
            return error_response(401, "unauthorized", "the API key is not one this server accepts",
                                  headers=_challenge("invalid_token"))
        if needed and needed not in scopes:
            return error_response(403, "insufficient_scope", f"this API key lacks the '{needed}' scope (it has: "
                                  f"{', '.join(sorted(scopes))})", headers=_challenge("insufficient_scope", needed))
        return None


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
            ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{error_model.__name__}"}}}}
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
                    scope_refusal = "the API key lacks this operation's scope (insufficient_scope)"
                    if "403" in answers:  # the route's own 403 too (reload_disabled)
                        answers["403"]["description"] += f"; or {scope_refusal}"
                    else:
                        answers["403"] = {"description": scope_refusal, **ref}
        return app.openapi_schema or make()

    app.openapi = openapi
