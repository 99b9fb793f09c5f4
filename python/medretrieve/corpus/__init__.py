"""Corpus: readers (``sources``), hierarchical chunking (``chunking``), BM25 (``lexical``), and the collection
directory that holds a corpus's chunks, dense index and lexical index (``collection``)."""
