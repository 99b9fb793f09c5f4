"""Evaluation: metrics (``metrics``), retrieval evaluation runs (``evaluate``), the multiple-choice sets of MIRAGE
(``datasets``), tables and plots (``report``); BioASQ (``bioasq``: its files, answers, batches and submissions) and
MedRGB (``medrgb``: its prompts, parsers, schemas and runs) each in a subpackage of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .bioasq.golden import BioASQQuestion as BioASQQuestion
    from .datasets import MCQuestion as MCQuestion
    from .bioasq.golden import load_bioasq as load_bioasq
    from .datasets import load_dataset as load_dataset
    from .evaluate import evaluate_retrieval as evaluate_retrieval
    from .bioasq.answers import evaluate_bioasq_answers as evaluate_bioasq_answers

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
