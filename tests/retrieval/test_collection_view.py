"""The collection protocol: every collection kind retrieval searches has what the stages read of it."""
from __future__ import annotations

import pytest

from medretrieve.corpus.memory import MemoryCollection
from medretrieve.retrieval.collection_view import CollectionView, SearchableCollection


@pytest.fixture(scope="module")
def collection(demo_collection_dir):
    from medretrieve.corpus.collection import Collection

    return Collection.open(demo_collection_dir)


def test_local_collection_kinds_implement_the_protocols(collection):
    for kind in (collection, collection.snapshot(), MemoryCollection.like(collection)):
        assert isinstance(kind, SearchableCollection) and isinstance(kind, CollectionView), type(kind).__name__


def test_a_stand_in_missing_a_member_is_not_a_collection_view():
    class Partial:  # what a stand-in forgetting encode_queries would look like
        rows = alive = lexical = dense = manifest = query_encoder_dir = None
        n_documents = dim = 0
        normalized = True

        def __len__(self) -> int:
            return 0

        def allowed(self, labels):
            return None

        def vectors(self, rows):
            return None

        def document_rows(self, document_id):
            return []

        def parent(self, parent_id):
            return None

    assert not isinstance(Partial(), CollectionView)
    Partial.encode_queries = lambda self, texts: None
    assert isinstance(Partial(), CollectionView)


def test_the_sharded_stand_in_implements_the_view():
    pytest.importorskip("ray")
    from medretrieve.distributed.sharded_collection import GlobalStats, ShardedCollection

    stats = GlobalStats(chunks=0, documents=0, bm25_rows=0, bm25_tokens=0, k1=1.5, b=0.75, labels=frozenset(), dim=4)
    sharded = ShardedCollection(None, stats, None, {"index": {"normalized": True}}, "")  # type: ignore[arg-type]
    assert isinstance(sharded, CollectionView)
    assert not isinstance(sharded, SearchableCollection)  # no article encoder: it brings its own first stage
