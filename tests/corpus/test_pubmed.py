"""PubMed E-utilities client against a fake E-utilities server on loopback (no network)."""
from __future__ import annotations

import threading
import time

import pytest

from medretrieve.corpus.pubmed import (PubMedBadResponse, PubMedError, PubMedHTTPError, PubMedSource,
                                       PubMedTimeout, RateLimiter)
from medretrieve.corpus.sources import ReadReport
from llm_server import refused_base_url
from pubmed_server import FakeEutils, fixture_text

pytest.importorskip("httpx")


def test_search_sends_ncbi_parameters_and_returns_pmids_by_relevance():
    with FakeEutils() as srv, PubMedSource(srv.base_url, email="dev@example.org", tool="mrtest") as src:
        ids = src.search("aspirin platelets", retmax=60, mindate="2015", maxdate="2020/12/31")
        assert ids[:2] == ["30000001", "30000002"] and "30000004" not in ids
        p = srv.requests[0]["params"]
        assert srv.requests[0]["endpoint"] == "esearch.fcgi" and srv.requests[0]["method"] == "GET"
        assert p["db"] == "pubmed" and p["sort"] == "relevance" and p["retmode"] == "json"
        assert p["retmax"] == "60" and p["tool"] == "mrtest" and p["email"] == "dev@example.org"
        assert p["datetype"] == "pdat" and p["mindate"] == "2015" and p["maxdate"] == "2020/12/31"
        assert "api_key" not in p
        assert src.search("zzqx") == []  # documented empty reply


@pytest.mark.parametrize("kwargs,match", [
    ({"term": " "}, "term"), ({"term": "a", "retmax": 0}, "retmax"), ({"term": "a", "retmax": 10001}, "retmax"),
    ({"term": "a", "mindate": "2015"}, "together"), ({"term": "a", "mindate": "15", "maxdate": "2020"}, "mindate"),
    ({"term": "a", "mindate": "2015", "maxdate": "2020", "datetype": "xdat"}, "datetype"),
])
def test_search_rejects_bad_arguments_before_any_request(kwargs, match):
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(ValueError, match=match):
            src.search(**kwargs)
        assert srv.count() == 0


def test_constructor_checks():
    with pytest.raises(ValueError, match="base_url"):
        PubMedSource("ftp://x")
    with pytest.raises(ValueError, match="tool"):
        PubMedSource("http://127.0.0.1:9/", tool="my tool")


def test_fetch_posts_ids_and_parses_medline_in_the_order_asked():
    with FakeEutils() as srv, PubMedSource(srv.base_url, api_key="KEY") as src:
        recs = src.fetch(["30000004", 30000001, "99999999", "30000001"])
        assert [r.id for r in recs] == ["30000004", "30000001"]  # unknown PMID left out, duplicate once
        req = srv.requests[0]
        assert req["method"] == "POST" and req["params"]["id"] == "30000004,30000001,99999999"
        assert req["params"]["retmode"] == "xml" and req["params"]["api_key"] == "KEY"
        aspirin = recs[1]
        assert aspirin.title.startswith("Aspirin inhibits")
        assert [s.title for s in aspirin.sections] == ["background", "results", "conclusions"]
        abstract = " ".join(s.text for s in aspirin.sections)  # BioASQ's abstract: the parts joined by a space
        for s in aspirin.sections:
            assert s.source_section == "abstract"
            assert abstract[s.source_offset:s.source_offset + len(s.text)] == s.text
        assert aspirin.metadata["year"] == 2019 and aspirin.metadata["publication_date"] == "2019-03"
        title_only = src.fetch(["30000003"])[0]
        assert title_only.sections[0].source_section == "title"
        with pytest.raises(ValueError, match="PMID"):
            src.fetch(["123abc"])
        with pytest.raises(TypeError):
            src.fetch("30000001")


def test_429_with_retry_after_is_honoured():
    state = {"n": 0}

    def script(endpoint, params):
        state["n"] += 1
        if state["n"] == 1:
            return 429, fixture_text("rate_limited.json"), 0.0, {"Retry-After": "0.3"}
        return None

    with FakeEutils(script) as srv, PubMedSource(srv.base_url) as src:
        assert src.search("aspirin")[0] == "30000001"
        assert srv.count() == 2 and src.requests_sent == 2
        assert srv.requests[1]["time"] - srv.requests[0]["time"] >= 0.28


def test_5xx_is_retried_with_backoff_then_gives_up():
    state = {"n": 0}

    def flaky(endpoint, params):
        state["n"] += 1
        return (503, "<html>Service unavailable</html>", 0.0) if state["n"] == 1 else None

    with FakeEutils(flaky) as srv, PubMedSource(srv.base_url) as src:
        assert src.search("metformin") == ["30000004"]
        assert srv.count() == 2 and srv.requests[1]["time"] - srv.requests[0]["time"] >= 0.45  # 0.5 s backoff
    with FakeEutils(lambda e, p: (500, "boom", 0.0)) as srv, PubMedSource(srv.base_url, max_retries=1) as src:
        with pytest.raises(PubMedError, match="HTTP 500.*gave up after 2 tries"):
            src.search("metformin")
        assert srv.count() == 2


def test_other_4xx_fails_at_once():
    with FakeEutils(lambda e, p: (400, {"error": "Invalid db name"}, 0.0)) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedHTTPError, match="400.*Invalid db name") as err:
            src.search("aspirin")
        assert err.value.status == 400 and srv.count() == 1


def test_slow_server_meets_the_whole_call_deadline():
    with FakeEutils(lambda e, p: (200, fixture_text("esearch_aspirin.json"), 3.0)) as srv, \
            PubMedSource(srv.base_url) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedTimeout, match="deadline"):
            src.search("aspirin", deadline_ms=300)
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(PubMedTimeout):
            src.search("aspirin", deadline_ms=0)


def test_retry_that_would_pass_the_deadline_is_not_waited_for():
    reply = (429, fixture_text("rate_limited.json"), 0.0, {"Retry-After": "5"})
    with FakeEutils(lambda e, p: reply) as srv, PubMedSource(srv.base_url) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedTimeout, match="429"):
            src.search("aspirin", deadline_ms=1000)
        assert time.monotonic() - t0 < 0.9 and srv.count() == 1


def test_malformed_replies_raise_and_are_not_cached(tmp_path):
    def script(endpoint, params):
        if endpoint == "efetch.fcgi":
            return 200, fixture_text("efetch_malformed.xml"), 0.0
        return 200, "<html>not json</html>", 0.0

    with FakeEutils(script) as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        with pytest.raises(PubMedBadResponse, match="not well-formed XML"):
            src.fetch(["30000001"])
        with pytest.raises(PubMedBadResponse, match="not JSON"):
            src.search("aspirin")
        with pytest.raises(PubMedBadResponse, match="not well-formed XML"):
            src.fetch(["30000001"])  # asked again: nothing was cached
        assert srv.count("efetch.fcgi") == 2
    with FakeEutils(lambda e, p: (200, fixture_text("esearch_error.json"), 0.0)) as srv, \
            PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="Invalid query"):
            src.search("aspirin[zz]")


def test_cache_makes_a_rerun_free_and_offline(tmp_path):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        ids = src.search("aspirin platelets", retmax=80)
        recs = src.fetch(ids + ["99999999"])
        assert srv.count() == 2
        assert src.search("aspirin  platelets", retmax=80) == ids  # same query: from the cache
        assert [r.id for r in src.fetch(ids)] == [r.id for r in recs]
        assert srv.count() == 2
        src.search("aspirin platelets", retmax=10)  # other parameters: a new request
        assert srv.count() == 3
    offline = PubMedSource(refused_base_url(), cache_dir=tmp_path)  # nothing listens there
    assert offline.search("aspirin platelets", retmax=80) == ids
    again = offline.fetch(ids + ["99999999"])  # the missing PMID is cached as missing too
    assert [(r.id, r.title, [s.text for s in r.sections]) for r in again] == \
           [(r.id, r.title, [s.text for s in r.sections]) for r in recs]
    assert [s.source_offset for s in again[0].sections] == [s.source_offset for s in recs[0].sections]
    assert offline.requests_sent == 0
    with pytest.raises(PubMedError, match="cannot reach"):
        PubMedSource(refused_base_url(), max_retries=0).search("aspirin")


def test_deadline_during_fetch_returns_what_was_fetched(tmp_path):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        src.fetch(["30000002"])
    slow = lambda e, p: (200, b"<PubmedArticleSet/>", 3.0)  # noqa: E731
    with FakeEutils(slow) as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        with pytest.raises(PubMedTimeout) as err:
            src.fetch(["30000001", "30000002"], deadline_ms=300)
        assert [r.id for r in err.value.records] == ["30000002"]


def test_malformed_citation_is_skipped_into_the_report():
    bad = (b'<?xml version="1.0"?><PubmedArticleSet><PubmedArticle><MedlineCitation><PMID>30000009</PMID>'
           b'</MedlineCitation></PubmedArticle></PubmedArticleSet>')
    with FakeEutils(lambda e, p: (200, bad, 0.0)) as srv, PubMedSource(srv.base_url) as src:
        report = ReadReport()
        assert src.fetch(["30000009"], report=report) == []
        assert report.n_skipped == 1 and "no Article" in report.skipped[0][1]


@pytest.mark.parametrize("api_key,limit,n", [(None, 3, 8), ("KEY", 10, 24)])
def test_rate_limit_seen_by_the_server_across_threads(api_key, limit, n):
    """NCBI: at most 3 requests/s without an API key, 10 with one, whatever the number of threads."""
    with FakeEutils() as srv:
        sources = [PubMedSource(srv.base_url, api_key=api_key) for _ in range(2)]  # the limiter is shared
        errors = []

        def worker(i: int) -> None:
            try:
                sources[i % 2].search(f"aspirin {i}")
            except Exception as exc:  # pragma: no cover - shows up in the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        for s in sources:
            s.close()
    assert not errors and srv.count() == n
    assert srv.max_per_window(1.0) <= limit
    assert srv.max_per_window(1.0) == limit  # and the limit is used, not undershot
    assert took >= (n - 1) // limit * 1.0


def test_rate_limiter_counts_from_the_finish_and_honours_the_deadline():
    lim = RateLimiter(2, window_s=1.0)
    with lim.slot():
        time.sleep(0.3)  # a slow request: its slot is held until it finishes, then for the window
    with lim.slot():
        pass
    finished = time.monotonic()
    with pytest.raises(PubMedTimeout, match="slot"):
        with lim.slot(deadline=time.monotonic() + 0.2):
            pass
    t0 = time.monotonic()
    with lim.slot(deadline=time.monotonic() + 2.0):
        pass
    assert time.monotonic() - finished >= 0.95 - 0.3 and time.monotonic() - t0 < 1.5
    with pytest.raises(ValueError):
        RateLimiter(0)


def test_rate_limiter_waits_for_requests_in_flight():
    lim = RateLimiter(1, window_s=0.2)
    started = threading.Event()
    order = []

    def slow():
        with lim.slot():
            started.set()
            time.sleep(0.3)
            order.append("first done")

    t = threading.Thread(target=slow)
    t.start()
    started.wait()
    with pytest.raises(PubMedTimeout):
        with lim.slot(deadline=time.monotonic() + 0.1):  # the only slot is in flight
            pass
    with lim.slot():
        order.append("second")
    t.join()
    assert order == ["first done", "second"]
