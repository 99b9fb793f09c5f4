"""Evaluation: BioASQ and MIRAGE loaders (``datasets``), metrics (``metrics``), MedRGB scenarios (``medrgb``),
evaluation runs (``evaluate``), tables and plots (``report``)."""
