"""The service's own pages over HTTP (a real ``medretrieve serve``): the search page and its files, the OpenAPI docs
pages whose scripts come from the server itself. Their behaviour in a browser: test_pages_browser.py."""
from __future__ import annotations

import re

import httpx
import pytest

from medretrieve.server.pages import DOCS_STATIC, PAGE_STATIC, WEB

OFFSITE = re.compile(r"""(?:src|href)\s*=\s*["']?((?:https?:)?//[^"' >]+)""", re.I)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


def _local_references(html: str) -> list:
    return re.findall(r"""(?:src|href)=["']([^"'#]+)["']""", html)


def test_the_search_page_is_served_with_a_same_origin_policy(http):
    r = http.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.text == (WEB / "index.html").read_text(encoding="utf-8")
    policy = r.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "script-src 'self'" in policy
    assert not OFFSITE.findall(r.text)
    assert 'id="question"' in r.text and '<label for="question">' in r.text and 'aria-live="polite"' in r.text


def test_every_file_the_search_page_names_is_served(http):
    html = http.get("/").text
    refs = [ref for ref in _local_references(html) if not ref.startswith("data:")]
    assert f"{PAGE_STATIC.lstrip('/')}/page.js" in refs and f"{PAGE_STATIC.lstrip('/')}/page.css" in refs
    for ref in refs:
        r = http.get("/" + ref)
        assert r.status_code == 200, ref
    assert http.get(f"{PAGE_STATIC}/page.js").headers["content-type"].split(";")[0] in (
        "text/javascript", "application/javascript")
    assert http.get(f"{PAGE_STATIC}/page.css").headers["content-type"].startswith("text/css")


def test_the_page_script_asks_only_its_own_server():
    script = (WEB / "page.js").read_text(encoding="utf-8")
    fetched = re.findall(r"postJson\(\"([^\"]+)\"", script) + re.findall(r"fetch\(\"([^\"]+)\"", script)
    # relative: the server that sent the page
    assert sorted(set(fetched)) == ["v1/answer", "v1/collection", "v1/facets", "v1/search"]
    assert not re.findall(r"fetch\((?!\"v1/collection\"|path)", script)  # no other fetch
    assert "innerHTML" not in script  # hits and answers are inserted as text, never parsed as HTML


def test_api_docs_load_their_scripts_from_the_server(http):
    r = http.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not OFFSITE.findall(r.text), OFFSITE.findall(r.text)
    assert "cdn" not in r.text.lower() and "fonts.googleapis" not in r.text
    refs = _local_references(r.text) + re.findall(r"""url:\s*['"]([^'"]+)['"]""", r.text)
    assert f"{DOCS_STATIC}/swagger-ui-bundle.js" in refs and "/openapi.json" in refs
    for ref in refs:
        assert http.get(ref).status_code == 200, ref
    assert '"validatorUrl": null' in r.text  # Swagger UI would send the schema to its online validator
    assert http.get("/redoc").status_code == 404  # ReDoc would load its logo from its vendor's CDN


def test_pages_stay_out_of_the_api_schema(http):
    paths = http.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/docs" not in paths and not any(p.startswith("/static") for p in paths)
    assert "/v1/search" in paths



@pytest.mark.parametrize("path", ["/", f"{PAGE_STATIC}/index.html", f"{PAGE_STATIC}/page.js", f"{PAGE_STATIC}/page.css"])
def test_every_copy_of_the_page_and_its_files_carries_the_policy(http, path):
    # the same page under PAGE_STATIC came without its policy (and unsniffed type) before
    r = http.get(path)
    assert r.status_code == 200 and "default-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_page_answers_head_as_its_files_do(http):
    # HEAD / was 405 while HEAD of its files was 200
    for path in ("/", f"{PAGE_STATIC}/page.js"):
        r = http.head(path)
        assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) > 0, path
