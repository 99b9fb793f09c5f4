"""Retrieval: from a question to ranked evidence chunks under a deadline.

Modules, in the order a search uses them: ``query`` (the question analysed once), ``expansion`` (query
variants), ``candidates`` (first stage, feedback, fusion), ``rerank`` / ``ranker`` (learned ranker, cross-encoder,
heuristics), ``diversify`` (MMR), ``recovery`` (selection, weak questions, pruning), ``results`` (what a search
returns), ``budget`` (deadline and cost estimates), ``settings`` (tuning), ``retriever`` (``Retriever``).
"""
