"""The chunk token cache: the lexical index's tokens, bounded, evicting one row at a time, invisible to the
cycle collector (a full garbage collection over a large cache was what made rare searches miss their deadline)."""
from __future__ import annotations

import gc

import pytest

from medretrieve.retrieval.matching import ChunkTokens, jaccard


@pytest.fixture(scope="module")
def collection(demo_collection_dir):
    from medretrieve.corpus.collection import Collection

    return Collection.open(demo_collection_dir)


def test_rows_hold_the_tokens_the_lexical_index_stored(collection):
    tokens = ChunkTokens(collection)
    for row in range(min(len(collection.rows), 20)):
        assert set(tokens.of_row(row)) == set(collection.lexical.tokens_of(row))
        assert tokens.of_row(row) is tokens.of_row(row)  # cached


def test_cache_is_bounded_and_evicts_the_oldest_row_first(collection):
    n = min(len(collection.rows), 12)
    tokens = ChunkTokens(collection, max_rows=5)
    first = tokens.of_row(0)
    for row in range(1, n):
        tokens.of_row(row)
        assert len(tokens._rows) <= 5
    assert list(tokens._rows) == list(range(n - 5, n))  # the newest five, oldest gone one at a time
    assert tokens.of_row(0) == first and tokens.of_row(0) is not first  # read again after eviction


def test_cached_token_sets_are_not_tracked_by_the_cycle_collector(collection):
    tokens = ChunkTokens(collection)
    toks = tokens.of_row(0)
    (behind,) = gc.get_referents(toks)  # the dict behind the key view
    assert isinstance(behind, dict) and not gc.is_tracked(behind)
    # the set operations the rerank and recovery stages use work on the views
    other = tokens.of_row(1)
    assert 0.0 <= jaccard(toks, other) <= 1.0 and jaccard(toks, toks) == 1.0
    some = frozenset(list(toks)[:2])
    assert some <= toks and bool(some & toks)
    doc = collection.rows[0].document_id
    assert set(toks) <= tokens.of_document(doc)
