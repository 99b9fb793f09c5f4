"""Corpus: readers (``sources``), hierarchical chunking (``chunking``), BM25 (``lexical``), and the collection
directory that holds a corpus's chunks (the row table, ``chunk_table``), dense index and lexical index
(``collection``)."""
