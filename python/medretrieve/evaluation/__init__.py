"""Evaluation: BioASQ and MIRAGE loaders (``datasets``), metrics (``metrics``), MedRGB scenarios (``medrgb``),
evaluation runs (``evaluate``), tables and plots (``report``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .datasets import BioASQQuestion as BioASQQuestion
    from .datasets import MCQuestion as MCQuestion
    from .datasets import load_bioasq as load_bioasq
    from .datasets import load_dataset as load_dataset
    from .evaluate import evaluate_retrieval as evaluate_retrieval
    from .evaluate import evaluate_bioasq_answers as evaluate_bioasq_answers

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
