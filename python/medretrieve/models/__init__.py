"""Models: ONNX Runtime encoders in the MedCPT style and the embedded default model (``encoders``), and the torch
exporter (``export``, export time only)."""
