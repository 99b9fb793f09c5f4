"""Training from questions with known relevant documents: the learned ranker (``ranker_fitting``), the query encoder
(``query_encoder``), both towers of a symmetric encoder (``encoder``) and a cross-encoder (``cross_encoder``).
Torch is needed for the encoders, at fit time only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .ranker_fitting import fit_ranker as fit_ranker
    from .query_encoder import fit_query_encoder as fit_query_encoder
    from .encoder import fit_encoder as fit_encoder
    from .cross_encoder import fit_cross_encoder as fit_cross_encoder

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
