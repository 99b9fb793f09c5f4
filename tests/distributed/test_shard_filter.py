"""A shard's side of a filtered sharded search, without Ray (``ShardSearcher`` is a plain class): the filter read
with every shard's fields (a field this shard lacks: no values), one compiled view per filter until the shard's
next version, searches and counts only over the rows passing it."""
from __future__ import annotations

import numpy as np
import pytest

from sharded_data import QUESTIONS, corpus_records, encoder_dir  # noqa: F401

from medretrieve.corpus.collection import Collection
from medretrieve.distributed.shard_actor import ShardSearcher
from medretrieve.filters import FilterError, parse_filter
from medretrieve.distributed.shard_filter import check_filter, sum_facets


@pytest.fixture(scope="module")
def shard(tmp_path_factory, encoder_dir):
    records = [{**r, "year": 2000 + i, "retracted": i % 5 == 0} for i, r in enumerate(corpus_records()[:12])]
    out = tmp_path_factory.mktemp("shard") / "shard0"
    Collection.build(records, out, encoder=encoder_dir, progress=False, dtype="float32")
    return ShardSearcher(str(out))


def _where(text, shard, **extra):
    return parse_filter(text).text(), {**shard.stats()["metadata_fields"], **extra}


def test_a_field_the_shard_lacks_has_no_values_there(shard):
    assert "journal" not in shard.stats()["metadata_fields"]
    fields = {"journal": "keyword"}
    assert shard.passing(_where("journal == Lancet", shard, **fields))["rows"] == 0
    everything = shard.passing(_where("not journal == Lancet", shard, **fields))
    assert everything["rows"] == len(shard.collection) and everything["labels"]
    assert shard.filters.view(_where("not journal == Lancet", shard, **fields)) is shard.collection.snapshot()
    counted = shard.facets(["journal", "year"], None, {**shard.stats()["metadata_fields"], **fields})
    assert counted["documents"] == 12 and counted["facets"]["journal"] == [] and len(counted["facets"]["year"]) == 12
    with pytest.raises(FilterError, match="unknown field 'journal'"):  # the shard's own schema alone refuses it
        shard.passing(_where("journal == Lancet", shard))


def test_the_shard_searches_only_the_rows_passing_and_keeps_one_view_per_version(shard):
    where = _where("year >= 2006 and not retracted", shard)
    view = shard.filters.view(where)
    assert shard.filters.view(where) is view  # compiled once
    allowed = set(np.flatnonzero(view.alive).tolist())
    q = shard.collection.encode_queries([QUESTIONS[0]])
    for got in shard.dense(q, 10, [64], None, where)[0]["ids"], shard.lexical([["glucose", "gout"]], 10, None,
                                                                               where)["lists"][0]["ids"]:
        assert len(got) and set(got.tolist()) <= allowed
    before = shard.passing(where)["rows"]
    shard.collection.add([{"id": "new", "title": "Late note", "year": 2020, "retracted": False,
                           "sections": [{"title": "Treatment", "text": "metformin lowers glucose"}]}])
    assert shard.filters.view(where) is not view  # a new version: compiled again
    assert shard.passing(where)["rows"] > before


def test_the_caller_checks_a_filter_and_sums_counts():
    fields = {"year": "integer", "journal": "keyword"}
    check_filter(parse_filter("year >= 2000 and journal == BMJ"), fields, ["journal"])
    with pytest.raises(FilterError, match="unknown field 'colour'"):
        check_filter(parse_filter("colour == red"), fields)
    with pytest.raises(FilterError, match="unknown field 'colour'"):
        check_filter(None, fields, ["colour"])
    with pytest.raises(FilterError, match="not a date|integer"):
        check_filter(parse_filter("year == Review"), fields)
    assert sum_facets([{"year": [(2001, 2), (2000, 1)]}, {"year": [(2000, 2)]}, {}], ["year"], None) == {
        "year": [(2000, 3), (2001, 2)]}
    assert sum_facets([{"year": [(2001, 2), (2000, 1)]}, {"year": [(2000, 2)]}], ["year"], 1) == {"year": [(2000, 3)]}
