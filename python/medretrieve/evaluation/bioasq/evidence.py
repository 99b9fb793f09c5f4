"""BioASQ Phase A evidence from ranked hits: the documents as PubMed URLs and the snippets that know their place
in their article (what a submission and the run cache hold)."""
from __future__ import annotations

from typing import Any, Sequence

from ...generation.generate import field_of
from ..metrics import _unique

__all__ = ["PUBMED_URL", "bioasq_evidence"]

#: BioASQ names a document by this URL followed by its PMID.
PUBMED_URL = "http://www.ncbi.nlm.nih.gov/pubmed/"


def bioasq_evidence(hits: Sequence[Any], k: int = 10) -> dict[str, list]:
    """BioASQ Phase A evidence from ranked hits: ``documents`` (PubMed URLs of the first ``k`` distinct
    documents) and ``snippets`` (the first ``k`` hits that know their place in the source, ``Hit.span``: the
    text with its section and character span). A hit without a span is left out of the snippets rather than
    given made-up offsets. A snippet's ``text`` is the section's own characters at its offsets (the span's
    ``text`` where the hit's whitespace-normalised text differs from them)."""
    docs = _unique(str(field_of(h, "document_id", "")) for h in hits if field_of(h, "document_id", ""))[:k]
    snippets: list[dict] = []
    for h in hits:
        span = field_of(h, "span", None)
        if span and len(snippets) < k:
            snippets.append({"document": PUBMED_URL + str(field_of(h, "document_id")),
                             **span, "text": str(span.get("text", field_of(h, "text")))})
    return {"documents": [PUBMED_URL + d for d in docs], "snippets": snippets}
