"""Hypothesis properties of the PubMed cache and reply parsers: for any input, the documented result or a
:class:`PubMedBadResponse` (a cache: a miss) -- never another exception, never a wrong value."""
from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medretrieve.corpus.eutils import PubMedBadResponse, _Decoder, retry_after_s
from medretrieve.corpus.pubmed import efetch_records, esearch_ids
from medretrieve.corpus.pubmed_cache import PubMedCache, is_pmid
from medretrieve.corpus.sources import ReadReport, Record, Section, record_from_dict, record_to_dict

SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
PMIDS = st.from_regex(r"[0-9]{1,12}", fullmatch=True)
# digits of every script, signs, spaces: what must not pass for a PMID
PMID_LIKE = st.text(st.characters(whitelist_categories=("Nd", "No", "Zs")) | st.sampled_from("+-.e\n"), max_size=14)


def _expected_ids(idlist):
    """What the documented rule says esearch_ids returns for this ``idlist``, or None when it must raise."""
    if not isinstance(idlist, list):
        return None
    out = []
    for i in idlist:
        s = str(i) if isinstance(i, int) and not isinstance(i, bool) else i
        if not is_pmid(s):
            return None
        out.append(s)
    return list(dict.fromkeys(out))


@SETTINGS
@given(st.one_of(JSON, st.lists(PMIDS | PMID_LIKE | st.integers(-5, 10**13), max_size=6)))
def test_esearch_ids_returns_pmids_or_refuses(idlist):
    body = json.dumps({"esearchresult": {"count": "1", "idlist": idlist}}).encode()
    want = _expected_ids(idlist)
    if want is None:
        with pytest.raises(PubMedBadResponse):
            esearch_ids(body)
    else:
        assert esearch_ids(body) == want


@SETTINGS
@given(st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode()))
def test_esearch_ids_never_raises_anything_else(body):
    try:
        ids = esearch_ids(body)
    except PubMedBadResponse:
        return
    assert all(is_pmid(i) for i in ids)


XML_PARTS = st.sampled_from(["<PubmedArticleSet>", "</PubmedArticleSet>", "<PubmedArticle>", "</PubmedArticle>",
                             "<MedlineCitation>", "</MedlineCitation>", "<PMID>123</PMID>", "<PMID>\u0661</PMID>",
                             "<Article>", "</Article>", "<ArticleTitle>T</ArticleTitle>", "<Abstract>",
                             "</Abstract>", '<AbstractText Label="X">a b.</AbstractText>', "&amp;", "&bogus;",
                             "<![CDATA[x]]>", "<?xml version='1.0'?>", "<!DOCTYPE x>", "\x00", "text"])


@SETTINGS
@given(st.lists(XML_PARTS, max_size=25).map("".join) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_efetch_records_returns_records_or_refuses(text):
    report = ReadReport()
    try:
        records = efetch_records(text.encode("utf-8"), report)
    except PubMedBadResponse:
        return
    assert all(isinstance(r, Record) and r.sections for r in records)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["db", "term", "retmax", "mindate"]), st.text(max_size=10) | st.integers()),
       st.lists(PMIDS, max_size=20), st.data())
def test_search_cache_round_trips_and_any_damage_is_a_miss(params, ids, data):
    junk = data.draw(JSON | st.fixed_dictionaries({
        "params": st.just(params) | JSON, "ids": JSON | st.lists(PMIDS | PMID_LIKE | st.integers(), max_size=4)}))
    with tempfile.TemporaryDirectory() as tmp:
        cache = PubMedCache(tmp)
        assert cache.get_search(params) is None
        cache.put_search(params, ids)
        assert cache.get_search(params) == ids
        (path,) = (Path(tmp) / "search").iterdir()
        path.write_text(json.dumps(junk))
        got = cache.get_search(params)
        assert got is None or (junk["params"] == params and got == junk["ids"] and all(is_pmid(i) for i in got))


SECTION_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(str.strip)


@SETTINGS
@given(PMIDS, st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
       st.lists(st.tuples(st.text(max_size=10), SECTION_TEXT), min_size=1, max_size=3), st.data())
def test_record_cache_round_trips_and_any_damage_is_a_miss(pmid, title, sections, data):
    junk = data.draw(JSON | st.fixed_dictionaries(
        {"id": st.just(pmid) | PMIDS | JSON, "title": JSON | st.text(max_size=5)},
        optional={"sections": JSON, "text": JSON | SECTION_TEXT, "missing": JSON}))
    record = Record(pmid, title, [Section(t, x) for t, x in sections])
    with tempfile.TemporaryDirectory() as tmp:
        cache = PubMedCache(tmp)
        cache.put_record(pmid, record)
        assert cache.get_record(pmid) == record_from_dict(record_to_dict(record))
        cache.put_record(pmid, None)
        assert cache.get_record(pmid) == PubMedCache.MISSING
        (Path(tmp) / "records" / f"{pmid}.json").write_text(json.dumps(junk))
        got = cache.get_record(pmid)
        if got == PubMedCache.MISSING:
            assert junk == {"missing": True}
        elif got is not None:
            assert isinstance(got, Record) and got.id == pmid and got.sections and str(junk["id"]) == pmid


@SETTINGS
@given(st.binary(max_size=5000), st.integers(1, 6000), st.integers(1, 700), st.booleans())
def test_decoding_stops_exactly_at_the_cap(data, limit, piece, gzipped):
    wire = gzip.compress(data) if gzipped else data
    dec = _Decoder("gzip" if gzipped else "", limit)
    ok = True
    for i in range(0, len(wire), piece):
        ok = dec.feed(wire[i:i + piece])
        if not ok:
            break
    assert ok == (len(data) <= limit)
    if ok:
        assert bytes(dec.body) == data
    assert len(dec.body) <= limit + 1


@SETTINGS
@given(st.text(max_size=40) | st.floats().map(repr) | st.integers(-10, 10**12).map(str))
def test_retry_after_is_a_finite_delay_or_refused(value):
    try:
        wait = retry_after_s(value, "esearch", 429)
    except PubMedBadResponse as exc:
        assert "Retry-After" in str(exc)
        return
    assert wait is not None and math.isfinite(wait) and wait >= 0
