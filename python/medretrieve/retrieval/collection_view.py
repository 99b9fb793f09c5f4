"""What retrieval reads of a collection: the declared interface between the ``corpus`` and ``distributed`` wings
and the search stages.

Three kinds implement it: a :class:`~medretrieve.corpus.collection.Collection` (and its immutable
:class:`~medretrieve.corpus.snapshot.CollectionSnapshot`, what a search reads), a
:class:`~medretrieve.corpus.memory.MemoryCollection` (an online search's pool) and ``distributed``'s
``ShardedCollection`` (a stand-in over the rows one sharded search fetched). The stages after the first one read
only :class:`CollectionView`; the first stage over one local collection (:class:`.first_stage.LocalFirstStage`)
also scores every row by BM25 (:class:`SearchableCollection`). mypy checks that each kind implements what it is
used as (:func:`_kinds_implement_the_protocols` below; ``ShardedRetriever`` passes its ``ShardedCollection`` as a
:class:`CollectionView`), and ``tests/retrieval/test_collection_view.py`` checks their members at run time.

Rows are integers: a collection's row numbers, or a sharded search's ``shard << 40 | row`` keys.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np

from ..corpus.chunk_table import ChunkRow
from ..corpus.chunking import SectionPart


class RowTable(Protocol):
    """``collection.rows[row]``: the chunk stored at a row."""

    def __getitem__(self, row: int) -> ChunkRow: ...


class RowMask(Protocol):
    """A set of rows (``alive``, ``allowed(labels)``) as the stages after the first read it: whether any row is
    in it (a local collection's is a boolean array over its rows)."""

    def any(self) -> Any: ...


class LexicalView(Protocol):
    """The BM25 index as the stages after the first read it."""

    def scores_for(self, query: Union[Sequence[str], np.ndarray], ids: Sequence[int]) -> np.ndarray:
        """BM25 scores of ``ids`` for the query tokens (or picked from a score vector over every row)."""

    def tokens_of(self, id: int) -> Optional[List[str]]:
        """A row's stored BM25 tokens (None when the index does not hold it)."""

    def idf(self, tokens: Sequence[str]) -> np.ndarray:
        """Inverse document frequency of each token."""

    def search(self, query: Sequence[str], k: int = 10, allowed: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        """The ``k`` best rows for the tokens and their scores, among the rows ``allowed`` (a :class:`RowMask`)."""


class ScoringLexicalView(LexicalView, Protocol):
    """A local BM25 index: it also scores every row at once (the first stage keeps the question's vector)."""

    def scores(self, query: Union[str, Sequence[str]], extra_tokens: Sequence[str] = ()) -> np.ndarray: ...

    def top(self, scores: np.ndarray, k: int = 10, allowed: Optional[np.ndarray] = None
            ) -> Tuple[np.ndarray, np.ndarray]: ...


class DenseView(Protocol):
    """The vector index: ``search(vectors [n, dim], k, ef, labels) -> (ids [n, k], scores [n, k])`` with -1 for
    missing ids (the native :class:`~medretrieve.index.Index` API)."""

    def search(self, vectors: np.ndarray, k: int, ef: Any = None, labels: Optional[List[int]] = None
               ) -> Tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class CollectionView(Protocol):
    """What the retrieval stages read of a collection (module docstring)."""

    @property
    def rows(self) -> RowTable: ...

    @property
    def alive(self) -> RowMask: ...

    @property
    def lexical(self) -> LexicalView: ...

    @property
    def dense(self) -> Any: ...

    @property
    def manifest(self) -> Dict[str, Any]: ...

    @property
    def query_encoder_dir(self) -> str: ...

    @property
    def n_documents(self) -> int: ...

    @property
    def dim(self) -> int: ...

    @property
    def normalized(self) -> bool: ...

    def __len__(self) -> int: ...

    def allowed(self, labels: Sequence[int]) -> RowMask:
        """The rows carrying one of the index ``labels`` (section categories)."""

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        """Stored vectors of ``rows``, float32 [n, dim]."""

    def document_rows(self, document_id: str) -> List[int]:
        """Rows of a document's live chunks, in document order."""

    def parent(self, parent_id: str) -> Optional[SectionPart]:
        """The section a chunk belongs to (None when not held)."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors float32 [n, dim]."""


@runtime_checkable
class SearchableCollection(CollectionView, Protocol):
    """A local collection: its BM25 index scores every row (:class:`.first_stage.LocalFirstStage` reads it)."""

    @property
    def lexical(self) -> ScoringLexicalView: ...

    @property
    def alive(self) -> np.ndarray: ...

    def allowed(self, labels: Sequence[int]) -> np.ndarray: ...

    def article_encoder(self) -> Any:
        """The article (chunk) encoder: an online search encodes the records it fetched."""


if TYPE_CHECKING:
    from ..corpus.collection import Collection
    from ..corpus.memory import MemoryCollection
    from ..corpus.snapshot import CollectionSnapshot

    def _kinds_implement_the_protocols(collection: Collection, snapshot: CollectionSnapshot,
                                       memory: MemoryCollection) -> List[SearchableCollection]:
        """Never called: mypy checks that the local collection kinds are searchable collections."""
        return [collection, snapshot, memory]
