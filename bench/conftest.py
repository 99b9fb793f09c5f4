"""The bench gates (``bench/test_bench_*.py``) use medretrieve's pytest plugin (``latency_gate``)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench helpers (datagen, fusion) for the gates


def pytest_configure(config: pytest.Config) -> None:
    from medretrieve.testing.plugin import ensure_registered

    ensure_registered(config)
