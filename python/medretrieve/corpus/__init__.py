"""Corpus: readers (``sources``), hierarchical chunking (``chunking``), BM25 (``lexical``), and the collection
directory that holds a corpus's chunks (the row table, ``chunk_table``), dense index and lexical index
(``collection``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .collection import Collection as Collection
    from .snapshot import CollectionSnapshot as CollectionSnapshot
    from .store import CollectionChanged as CollectionChanged
    from .store import DamagedCollection as DamagedCollection
    from .memory import MemoryCollection as MemoryCollection
    from .pubmed import PubMedSource as PubMedSource
    from .sources import Record as Record
    from .sources import SourceError as SourceError
    from .sources import read_records as read_records

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
