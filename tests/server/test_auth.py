"""Who may call the service (in-process, no sockets): API keys with scopes, the 401 / 403 refusals in the API's
error shape, the bearer scheme in the OpenAPI document, the keys' format and their constant-time lookup, CORS,
and ``/v1/collection`` without host paths."""
from __future__ import annotations

import hmac
import statistics
import time

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from medretrieve.server import create_app  # noqa: E402
from medretrieve.server.auth import SECURITY_SCHEME, required_scope  # noqa: E402
from medretrieve.server.keys import (KEYS_ENV, KeyRing, hash_key, keys_from_env, parse_keys,  # noqa: E402
                                     read_key_file)
from medretrieve.wire import ERROR_TYPES  # noqa: E402

SEARCH_KEY = "search-only-key-0123456789abcdef"
ANSWER_KEY = "answer-only-key-0123456789abcdef"
ADMIN_KEY = "admin-all-key-0123456789abcdef01"
KEYS = f"""
# the test's keys
{SEARCH_KEY} search
sha256:{hash_key(ANSWER_KEY)} answer   # given by its digest
{ADMIN_KEY} search, answer,admin
"""
QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
# (method, path, body, scope needed): every endpoint behind a key
GUARDED = [("POST", "/v1/search", {"question": QUESTION, "k": 2}, "search"),
           ("POST", "/v1/search:batch", {"questions": [QUESTION], "k": 2}, "search"),
           ("POST", "/v1/facets", {"fields": ["topic"]}, "search"),
           ("POST", "/v1/answer", {"question": QUESTION, "k": 2}, "answer"),
           ("POST", "/v1/admin/reload", None, "admin"),
           ("GET", "/v1/collection", None, ""),
           ("GET", "/metrics", None, "")]
KEY_OF = {"search": SEARCH_KEY, "answer": ANSWER_KEY, "admin": ADMIN_KEY}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def keyed(medretrieve_retriever):
    app = create_app(medretrieve_retriever, api_keys=parse_keys(KEYS, "test keys"), deadline_ms=60_000)
    with TestClient(app) as client:
        yield client


def _call(client, method, path, body, headers=None):
    return client.request(method, path, json=body, headers=headers or {})


def _refused(response, status, kind):
    assert response.status_code == status, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["type"] == kind and ERROR_TYPES[kind] == status and error["message"] and "field" in error
    return error


@pytest.mark.parametrize("method,path,body,scope", GUARDED)
def test_every_guarded_endpoint_refuses_without_a_key(keyed, method, path, body, scope):
    response = _call(keyed, method, path, body)
    _refused(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    for header in ({"Authorization": "Bearer " + "x" * 32}, {"Authorization": f"Basic {SEARCH_KEY}"},
                   {"Authorization": "Bearer"}, {"Authorization": f"Bearer {SEARCH_KEY}x"}):
        _refused(_call(keyed, method, path, body, header), 401, "unauthorized")


@pytest.mark.parametrize("method,path,body,scope", GUARDED)
def test_the_right_scope_opens_and_another_is_refused_403(keyed, method, path, body, scope):
    for name, key in KEY_OF.items():
        response = _call(keyed, method, path, body, bearer(key))
        if not scope or scope == name or key == ADMIN_KEY:
            if path == "/v1/admin/reload":  # let in; reload itself is off on this server (not enabled)
                _refused(response, 403, "reload_disabled")
            else:
                assert response.status_code == 200, (name, response.text)
        else:
            error = _refused(response, 403, "insufficient_scope")
            assert scope in error["message"]
            assert f'scope="{scope}"' in response.headers["WWW-Authenticate"]


def test_keys_hold_where_the_app_is_mounted_under_a_prefix(medretrieve_retriever):
    outer = fastapi.FastAPI()
    outer.mount("/retrieval", create_app(medretrieve_retriever, api_keys=parse_keys(KEYS)))
    with TestClient(outer) as client:
        assert client.get("/retrieval/healthz").status_code == 200
        _refused(client.post("/retrieval/v1/search", json={"question": QUESTION}), 401, "unauthorized")
        _refused(client.get("/retrieval/metrics"), 401, "unauthorized")
        reply = client.post("/retrieval/v1/search", json={"question": QUESTION, "k": 1}, headers=bearer(SEARCH_KEY))
        assert reply.status_code == 200
        _refused(client.post("/retrieval/v1/answer", json={"question": QUESTION}, headers=bearer(SEARCH_KEY)),
                 403, "insufficient_scope")


@pytest.mark.parametrize("header", [
    f"bearer {SEARCH_KEY}",  # the scheme is case-insensitive (RFC 7235)
    f"Bearer   {SEARCH_KEY}  ",
])
def test_the_bearer_header_as_clients_write_it(keyed, header):
    assert keyed.post("/v1/search", json={"question": QUESTION, "k": 1},
                      headers={"Authorization": header}).status_code == 200


@pytest.mark.parametrize("header", [
    f"Bearer sha256:{hash_key(SEARCH_KEY)}",  # the stored digest is no key
    f"Bearer {hash_key(SEARCH_KEY)}",
    f"Bearer {SEARCH_KEY[:-1]}",  # a right prefix
    f"Bearer {SEARCH_KEY.upper()}",
    f"Bearer {SEARCH_KEY}\x00",
    "Bearer " + "k" * 60_000,  # long: hashed like any other
    f"Bearer {SEARCH_KEY[:8]}\u00e9{SEARCH_KEY[9:]}",  # not ASCII (latin-1 on the wire)
    f"Token {SEARCH_KEY}",
    "",
])
def test_what_is_not_a_key_is_refused_401(keyed, header):
    headers = {"Authorization": header.encode("latin-1")} if header else {"Authorization": ""}
    _refused(keyed.post("/v1/search", json={"question": QUESTION}, headers=headers), 401, "unauthorized")


def test_two_authorization_headers_are_refused_whichever_comes_first(keyed):
    for pair in ([SEARCH_KEY, "wrong-key-0123456789abcdef"], ["wrong-key-0123456789abcdef", SEARCH_KEY],
                 [SEARCH_KEY, SEARCH_KEY]):
        headers = [("authorization", f"Bearer {key}") for key in pair]
        _refused(keyed.post("/v1/search", json={"question": QUESTION}, headers=headers), 401, "unauthorized")


@pytest.mark.parametrize("path", ["/v1/search/", "/v1//search", "/v1/%73earch", "/metrics/", "/v1/admin/reload/",
                                  "/v1/anything", "/v1/collection?x=1"])
def test_no_path_around_the_guard(keyed, path):
    reply = keyed.request("POST" if "search" in path or "admin" in path else "GET", path, json={"question": QUESTION},
                          follow_redirects=False)
    assert reply.status_code in (401, 404, 405, 307), (path, reply.status_code)
    if reply.status_code == 307:  # a slash redirect leads to the guarded path itself
        assert keyed.get(reply.headers["location"]).status_code in (401, 405)
    assert reply.status_code != 200


def test_health_readiness_and_pages_stay_open(keyed):
    for path in ("/healthz", "/readyz", "/", "/docs", "/openapi.json", "/static/page/page.js"):
        assert keyed.get(path).status_code == 200, path
    assert keyed.get("/nowhere").status_code == 404  # not a guarded path: nothing to hide


def test_the_bearer_scheme_is_in_the_openapi_document(keyed):
    spec = keyed.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"][SECURITY_SCHEME] == {
        "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"][SECURITY_SCHEME][
            "description"]}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            needed = required_scope(path)
            if needed is None:
                assert "security" not in operation, path
            else:
                assert operation["security"] == [{SECURITY_SCHEME: [needed] if needed else []}], path
                assert {"401", "403"} <= set(operation["responses"]), path
    guarded = {(m.lower(), p) for m, p, _, _ in GUARDED}
    documented = {(m, p) for p, ops in spec["paths"].items() for m, op in ops.items() if "security" in op}
    assert documented == guarded


def test_without_keys_nothing_is_asked_and_the_document_has_no_scheme(medretrieve_retriever):
    with TestClient(create_app(medretrieve_retriever)) as client:
        assert client.post("/v1/search", json={"question": QUESTION, "k": 1}).status_code == 200
        assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})


def test_a_key_is_checked_before_the_body_is_read(keyed):
    big = b"x" * (2 << 20)  # over the 1 MiB body limit: 413 for a caller with a key, 401 for one without
    assert keyed.post("/v1/search", content=big).status_code == 401
    assert keyed.post("/v1/search", content=big, headers=bearer(SEARCH_KEY)).status_code == 413


def test_collection_reports_names_not_host_paths(keyed, medretrieve_collection):
    info = keyed.get("/v1/collection", headers=bearer(SEARCH_KEY)).json()
    assert info["name"] == medretrieve_collection.directory.name and "directory" not in info
    assert info["model"]["encoder"]["source"] and info["model"]["ranker"] == "default"

    def strings(value):
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    absolute = [s for s in strings(info) if s.startswith("/") or s.startswith("~")]
    assert not absolute, absolute


@pytest.mark.parametrize("text,message", [
    ("short search", "16 to 512 characters"),
    ("key-with-a-quote\"-0123456789 search", "may hold only"),
    (f"{SEARCH_KEY}", "give a key and its scopes"),
    (f"{SEARCH_KEY} search,delete", "unknown: delete"),
    (f"{SEARCH_KEY} ,", "none given"),
    (f"{SEARCH_KEY} search\n{SEARCH_KEY} answer", "listed twice"),
    ("sha256:abc search", "16 to 512"),  # not 64 hex digits: taken as a key, and too short
])
def test_bad_key_entries_are_refused_naming_the_entry(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_keys(text, "keys.txt")
    assert "keys.txt" in str(info.value) and SEARCH_KEY not in str(info.value)


def test_keys_from_a_file_and_the_environment(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(KEYS, encoding="utf-8")
    from_file = read_key_file(path)
    assert [scopes for _, scopes in from_file] == [("search",), ("answer",), ("search", "answer", "admin")]
    assert all(len(digest) == 64 and SEARCH_KEY not in digest for digest, _ in from_file)
    assert keys_from_env({KEYS_ENV: f"{SEARCH_KEY} search; sha256:{hash_key(ANSWER_KEY)} answer"}) == from_file[:2]
    assert keys_from_env({}) == ()
    (tmp_path / "windows.txt").write_bytes(("\ufeff" + KEYS.replace("\n", "\r\n")).encode("utf-8"))  # BOM, CRLF
    assert read_key_file(tmp_path / "windows.txt") == from_file
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="holds no key"):
        read_key_file(tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_key_file(tmp_path / "missing.txt")


def test_the_lookup_compares_fixed_length_digests_with_compare_digest(monkeypatch):
    """The comparison is ``hmac.compare_digest`` over 32-byte SHA-256 digests, and every stored key is compared
    whatever matched (so neither the key's length, nor how much of it is right, nor its place changes the work)."""
    ring = KeyRing(parse_keys(KEYS))
    seen = []
    compare = hmac.compare_digest

    def spy(a, b):
        seen.append((len(a), len(b)))
        return compare(a, b)

    monkeypatch.setattr("medretrieve.server.keys.hmac.compare_digest", spy)
    for presented in (SEARCH_KEY.encode(), b"x", ADMIN_KEY.encode() * 10):
        seen.clear()
        ring.scopes_of(presented)
        assert seen == [(32, 32)] * 3


def test_the_lookup_time_does_not_depend_on_how_much_of_the_key_is_right():
    """Statistical: many lookups of a key right in all but its last character and of one wrong from its first
    are timed interleaved (so drifts of a busy machine hit both alike); their medians differ by less than the
    noise between two halves of the same kind, give or take a small absolute margin."""
    ring = KeyRing(parse_keys(KEYS))
    right_prefix = (SEARCH_KEY[:-1] + "X").encode()
    wrong_prefix = ("X" + SEARCH_KEY[1:]).encode()
    samples = {right_prefix: [], wrong_prefix: []}
    for _ in range(20_000):
        for key in (right_prefix, wrong_prefix):
            t0 = time.perf_counter_ns()
            ring.scopes_of(key)
            samples[key].append(time.perf_counter_ns() - t0)
    right, wrong = (statistics.median(samples[k]) for k in (right_prefix, wrong_prefix))
    halves = abs(statistics.median(samples[right_prefix][::2]) - statistics.median(samples[right_prefix][1::2]))
    assert abs(right - wrong) <= max(3 * halves, 0.05 * min(right, wrong), 200), (right, wrong, halves)


def test_cors_is_closed_unless_origins_are_given(medretrieve_retriever):
    origin = "https://app.example.org"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    with TestClient(create_app(medretrieve_retriever)) as closed:
        reply = closed.post("/v1/search", json={"question": QUESTION, "k": 1}, headers={"Origin": origin})
        assert "access-control-allow-origin" not in reply.headers
        assert "access-control-allow-origin" not in closed.options("/v1/search", headers=preflight).headers
    app = create_app(medretrieve_retriever, cors_origins=[origin], api_keys=parse_keys(KEYS))
    with TestClient(app) as opened:
        reply = opened.options("/v1/search", headers=preflight)  # a preflight carries no key: answered
        assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == origin
        assert "authorization" in reply.headers["access-control-allow-headers"].lower()
        refused = opened.post("/v1/search", json={"question": QUESTION}, headers={"Origin": origin})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == origin
        other = opened.options("/v1/search", headers={**preflight, "Origin": "https://evil.example"})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


def test_bad_settings_are_refused():
    from medretrieve.server import ServerConfig

    with pytest.raises(ValueError, match="api_keys holds"):
        ServerConfig("c", api_keys=[("not-a-digest", ("search",))])
    with pytest.raises(ValueError, match="scopes must be"):
        ServerConfig("c", api_keys=[(hash_key(SEARCH_KEY), ("root",))])
    with pytest.raises(ValueError, match="cors_origins"):
        ServerConfig("c", cors_origins="https://app.example.org")
    config = ServerConfig("c", api_keys=parse_keys(KEYS), cors_origins=["https://a.example"])
    assert ServerConfig.from_json(config.to_json()) == config
    assert SEARCH_KEY not in config.to_json()  # workers get digests only
