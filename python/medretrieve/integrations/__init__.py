"""Where users build: medretrieve's search inside LangChain, LlamaIndex and Haystack, and as MCP tools for agents.

Each door is its own module behind its own extra, imported only when used:

- :mod:`.langchain`: ``LangChainRetriever``, a ``langchain_core`` ``BaseRetriever`` (``invoke`` / ``ainvoke``).
- :mod:`.llamaindex`: ``LlamaIndexRetriever``, a ``llama_index.core`` ``BaseRetriever`` (``retrieve`` /
  ``aretrieve``, nodes with scores).
- :mod:`.haystack`: ``HaystackRetriever``, a Haystack 2.x ``@component`` (``run`` / ``run_async``).
- :mod:`.mcp_server`: an MCP server with ``search`` and ``answer`` tools (``medretrieve mcp COLLECTION``).

All of them search through :class:`.source.Searcher`: a local ``Retriever``, a ``Client`` / ``AsyncClient`` of a
``medretrieve serve`` process, a collection folder or a server URL; and carry each hit's text, score, document
id, section, BioASQ span and source link (:func:`.source.hit_metadata`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .haystack import HaystackRetriever as HaystackRetriever
    from .langchain import LangChainRetriever as LangChainRetriever
    from .llamaindex import LlamaIndexRetriever as LlamaIndexRetriever

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
