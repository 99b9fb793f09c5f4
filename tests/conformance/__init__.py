"""The conformance suite of issue 42 (a package, so that its conftest and helpers have names of their own)."""
