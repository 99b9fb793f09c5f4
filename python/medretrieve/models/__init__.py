"""Models: ONNX Runtime encoders in the MedCPT style and the embedded default model (``encoders``), and the torch
exporter (``export``, export time only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .encoders import QueryEncoder as QueryEncoder
    from .encoders import ArticleEncoder as ArticleEncoder
    from .encoders import CrossEncoder as CrossEncoder
    from .encoders import default_model_dir as default_model_dir

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
