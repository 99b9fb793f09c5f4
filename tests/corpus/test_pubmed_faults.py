"""The PubMed client against faulty and hostile upstreams (issue 34, findings 5-8): a fake E-utilities server on
loopback that trickles, floods, lies about lengths, sends bad ``Retry-After`` values and nested replies, and a
cache folder holding damaged entries or refusing writes."""
from __future__ import annotations

import json
import logging
import shutil
import time
import tracemalloc

import pytest

from medretrieve.corpus.pubmed import (PubMedBadResponse, PubMedError, PubMedRateLimited, PubMedSource,
                                       PubMedTimeout, PubMedTooLarge, PubMedUnavailable)
from medretrieve.corpus.pubmed_cache import PubMedCache
from pubmed_server import FakeEutils, fixture_text, flood, gzip_bomb, lie, nested_json, trickle

pytest.importorskip("httpx")
ASPIRIN = fixture_text("esearch_aspirin.json")


# ------------------------------------------------------------------ finding 5: one deadline per call


def test_a_body_trickled_at_one_byte_per_second_is_cut_at_the_call_deadline():
    with FakeEutils(lambda e, p: trickle(fixture_text("efetch_articles.xml"), every_s=1.0)) as srv, \
            PubMedSource(srv.base_url, timeout_s=3) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedTimeout, match="deadline"):
            src.fetch(["30000001"], deadline_ms=5000)
        took = time.monotonic() - t0
    assert 4.5 <= took < 6.0, took  # the deadline, not 20 s of reads that each stay under timeout_s
    assert srv.count() == 2  # the first try ran into timeout_s (3 s), the retry into the deadline


def test_trickled_headers_are_cut_at_the_deadline_too():
    with FakeEutils(lambda e, p: trickle(ASPIRIN, every_s=0.2, headers_too=True)) as srv, \
            PubMedSource(srv.base_url) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedTimeout):
            src.search("aspirin", deadline_ms=1200)
        assert time.monotonic() - t0 < 1.8


def test_timeout_s_bounds_each_whole_try_without_a_deadline():
    with FakeEutils(lambda e, p: trickle(ASPIRIN, every_s=0.1)) as srv, \
            PubMedSource(srv.base_url, timeout_s=0.6, max_retries=1) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedUnavailable, match="timeout_s=0.6.*gave up after 2 tries"):
            src.search("aspirin")
        assert time.monotonic() - t0 < 2.5 and srv.count() == 2  # 0.6 + 0.5 s backoff + 0.6


# ------------------------------------------------------------------ finding 6: reply size cap


@pytest.mark.parametrize("declare", [True, False])
def test_a_1_gb_reply_costs_no_more_than_the_cap(declare):
    cap = 1 << 20
    with FakeEutils(lambda e, p: flood(1 << 30, declare=declare)) as srv, \
            PubMedSource(srv.base_url, max_reply_bytes=cap) as src:
        tracemalloc.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(PubMedTooLarge, match="max_reply_bytes=1048576") as err:
                src.fetch(["30000001"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert err.value.limit_bytes == cap and srv.count() == 1  # not retried
        assert time.monotonic() - t0 < 10
    assert peak < 8 * cap, peak
    assert srv.bytes_sent < (1 << 30) // 8  # the client hung up early (declared: before the body)


def test_a_compression_bomb_is_decoded_only_up_to_the_cap():
    cap = 1 << 20
    with FakeEutils(lambda e, p: gzip_bomb(256 << 20)) as srv, PubMedSource(srv.base_url, max_reply_bytes=cap) as src:
        tracemalloc.start()
        try:
            with pytest.raises(PubMedTooLarge):
                src.fetch(["30000001"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * cap, peak


def test_a_gzip_reply_within_the_cap_is_decoded():
    import gzip

    from pubmed_server import Hostile

    body = gzip.compress(fixture_text("efetch_articles.xml").encode())
    with FakeEutils(lambda e, p: Hostile(body, headers={"Content-Encoding": "gzip"})) as srv, \
            PubMedSource(srv.base_url) as src:
        assert [r.id for r in src.fetch(["30000002", "30000001"])] == ["30000002", "30000001"]
    bad = lambda e, p: Hostile(b"not gzip at all", headers={"Content-Encoding": "gzip"})  # noqa: E731
    with FakeEutils(bad) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="gzip"):
            src.fetch(["30000001"])
    odd = lambda e, p: Hostile(b"x", headers={"Content-Encoding": "br"})  # noqa: E731
    with FakeEutils(odd) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="content encoding not asked for"):
            src.fetch(["30000001"])


def test_a_reply_shorter_than_its_content_length_is_retried_then_reported():
    with FakeEutils(lambda e, p: lie(ASPIRIN, declared=len(ASPIRIN) + 1000)) as srv, \
            PubMedSource(srv.base_url, max_retries=1) as src:
        with pytest.raises(PubMedUnavailable, match="gave up after 2 tries"):
            src.search("aspirin")
        assert srv.count() == 2


# ------------------------------------------------------------------ finding 7: Retry-After


def test_a_retry_after_longer_than_the_maximum_is_not_slept():
    reply = (429, fixture_text("rate_limited.json"), 0.0, {"Retry-After": "3600"})
    with FakeEutils(lambda e, p: reply) as srv, PubMedSource(srv.base_url) as src:
        t0 = time.monotonic()
        with pytest.raises(PubMedRateLimited, match="3600 s.*max_retry_after_s=60") as err:
            src.search("aspirin")  # no deadline: before, this slept an hour
        assert time.monotonic() - t0 < 1.0 and srv.count() == 1
        assert err.value.retry_after_s == 3600 and err.value.status == 429


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e9999", "soon", "", "Tue, 99 Foo 2024 00:00:00 GMT"])
def test_a_retry_after_that_is_not_a_finite_delay_is_refused(value):
    reply = (429, fixture_text("rate_limited.json"), 0.0, {"Retry-After": value})
    with FakeEutils(lambda e, p: reply) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="Retry-After"):
            src.search("aspirin")
        assert srv.count() == 1


def test_a_retry_after_as_an_http_date_is_honoured():
    state = {"n": 0}

    def script(endpoint, params):
        state["n"] += 1
        return (503, "busy", 0.0, {"Retry-After": "Tue, 01 Jan 2019 00:00:00 GMT"}) if state["n"] == 1 else None

    with FakeEutils(script) as srv, PubMedSource(srv.base_url) as src:
        assert src.search("aspirin")[0] == "30000001"  # a date in the past: retry at once
        assert srv.count() == 2 and srv.requests[1]["time"] - srv.requests[0]["time"] < 0.4


# ------------------------------------------------------------------ finding 8: named failures, cache, PMIDs


def test_a_deeply_nested_reply_is_a_bad_response_not_a_recursion_error():
    with FakeEutils(lambda e, p: (200, nested_json(100_000), 0.0)) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="nested too deep"):
            src.search("aspirin")
    deep_xml = b"<PubmedArticleSet>" + b"<a>" * 200_000 + b"</a>" * 200_000 + b"</PubmedArticleSet>"
    with FakeEutils(lambda e, p: (200, deep_xml, 0.0)) as srv, PubMedSource(srv.base_url) as src:
        assert src.fetch(["30000001"]) == []  # well-formed, holds no citation


def test_pmids_must_be_ascii_digits_everywhere():
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        for bad in ["\u0661\u0662\u0663", "12\u00b3", "１２３", "-5", "1.0", "", "123 456"]:
            with pytest.raises(ValueError, match="ASCII digits"):
                src.fetch([bad])
        with pytest.raises(ValueError, match="ASCII digits"):
            src.fetch([-5])
        assert srv.count() == 0
        assert [r.id for r in src.fetch([" 30000001\n", 30000002])] == ["30000001", "30000002"]
    arabic = {"esearchresult": {"count": "1", "idlist": ["\u0663\u0660\u0660"]}}
    with FakeEutils(lambda e, p: (200, arabic, 0.0)) as srv, PubMedSource(srv.base_url) as src:
        with pytest.raises(PubMedBadResponse, match="not PMIDs"):
            src.search("aspirin")


@pytest.mark.parametrize("entry", [
    {"params": None},  # no ids
    "987",  # not an object
    {"ids": "987"},  # ids a string: once gave the ids 9, 8 and 7
    {"ids": ["\u0661\u0662"]},  # non-ASCII digits
    {"ids": [30000001]},  # not strings
    {"ids": ["1; rm -rf /"]},
])
def test_a_damaged_search_entry_is_a_miss_and_is_rewritten(tmp_path, entry):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        ids = src.search("aspirin platelets")
        (path,) = (tmp_path / "search").iterdir()
        params = json.loads(path.read_text())["params"]
        if isinstance(entry, dict) and "params" not in entry:
            entry = dict(entry, params=params)
        path.write_text(json.dumps(entry))
        assert src.search("aspirin platelets") == ids and srv.count() == 2  # asked again
        assert json.loads(path.read_text()) == {"params": params, "ids": ids}  # and rewritten
        assert src.search("aspirin platelets") == ids and srv.count() == 2


@pytest.mark.parametrize("entry", ["[1, 2]", "{}", '{"id": "30000002", "title": "other", "text": "x"}',
                                   '{"id": "30000001", "sections": "nope"}', "\xff\xfe", '{"missing": "yes"}',
                                   "[" * 100_000])
def test_a_damaged_record_entry_is_a_miss_and_is_rewritten(tmp_path, entry):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        (good,) = src.fetch(["30000001"])
        path = tmp_path / "records" / "30000001.json"
        path.write_text(entry, encoding="latin-1")
        (again,) = src.fetch(["30000001"])
        assert again.title == good.title and srv.count() == 2
        assert json.loads(path.read_text())["id"] == "30000001"


def test_a_cache_that_cannot_be_written_logs_and_still_returns_the_result(tmp_path, caplog):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        shutil.rmtree(tmp_path / "search")
        (tmp_path / "search").write_text("a file where the folder was")  # writes fail even as root
        shutil.rmtree(tmp_path / "records")
        (tmp_path / "records").write_text("")
        with caplog.at_level(logging.WARNING, logger="medretrieve.pubmed"):
            ids = src.search("aspirin platelets")
            recs = src.fetch(ids)
        assert ids[0] == "30000001" and [r.id for r in recs] == ids
        assert src.cache is not None and src.cache.write_errors == 1 + len(ids)
        assert "cannot write" in caplog.text and "uncached" in caplog.text
    with pytest.raises(PubMedError, match="cannot create the PubMed cache folder"):
        PubMedSource("http://127.0.0.1:9/", cache_dir=tmp_path / "search" / "sub")


def test_vectors_in_the_cache_are_validated(tmp_path):
    import numpy as np

    cache = PubMedCache(tmp_path)
    vec = np.ones((3, 4), np.float32)
    cache.put_vectors("enc", "123", "d1", vec)
    assert np.array_equal(cache.get_vectors("enc", "123", "d1", 4), vec)
    assert cache.get_vectors("enc", "123", "d2", 4) is None  # other chunks
    assert cache.get_vectors("enc", "123", "d1", 8) is None  # other dimension
    assert cache.get_vectors("other", "123", "d1", 4) is None  # other encoder
    path = tmp_path / "vectors" / "enc" / "123.npz"
    path.write_bytes(path.read_bytes()[:40])  # truncated
    assert cache.get_vectors("enc", "123", "d1", 4) is None
    cache.put_vectors("enc", "123", "d1", np.full((3, 4), np.nan, np.float32))
    assert cache.get_vectors("enc", "123", "d1", 4) is None
    cache.put_vectors("enc", "123", "d1", vec)  # rewritten
    assert cache.get_vectors("enc", "123", "d1", 4) is not None


def test_bad_client_settings_are_refused():
    for kwargs in ({"max_reply_bytes": 10}, {"max_retry_after_s": float("nan")}, {"timeout_s": float("inf")},
                   {"efetch_batch": 0}, {"parallel": 0}, {"max_retries": -1}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            PubMedSource("http://127.0.0.1:9/", **kwargs)
    with pytest.raises(ValueError, match="deadline_ms"):
        PubMedSource("http://127.0.0.1:9/").search("x", deadline_ms=float("nan"))
