"""pytest plugin of medretrieve (registered through the ``pytest11`` entry point as ``medretrieve``).

Fixtures:

- ``medretrieve_collection`` (session): a tiny collection built once per session with the embedded model
  (:func:`~.collection.build_tiny_collection`);
  ``medretrieve_retriever`` (session): a warmed ``Retriever`` over it.
- ``latency_gate``: :class:`LatencyGate`, which fails a test when a pytest-benchmark measurement is over budget:
  ``latency_gate.check(benchmark, p50_ms=20, p99_ms=80)``, or, for noisy CI machines, the ratio form
  ``latency_gate.ratio(benchmark, path, reference, p50_ratio=1.2)`` (``path`` timed by pytest-benchmark, the
  ``reference`` timed between its rounds, so load hits both alike).

Marker: ``@pytest.mark.latency_budget(p50_ms=..., p99_ms=...)`` checks the test's ``benchmark`` measurement once
the test body has run. With ``--benchmark-disable`` nothing is measured and the gates are not checked (a warning
says so). Needs pytest >= 8 and pytest-benchmark.
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Iterator, List, Optional

import pytest

from .latency import LatencyBudgetExceeded, LatencyReport, check_budget, check_ratio, parse_budgets

MARKER = "latency_budget"


def ensure_registered(config: pytest.Config) -> None:
    """Register this plugin unless its ``pytest11`` entry point already did (a development checkout that is not
    pip-installed calls this from its conftest's ``pytest_configure``)."""
    import sys

    plugin = sys.modules[__name__]
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "medretrieve")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(p50_ms=..., p99_ms=...): fail the test when its pytest-benchmark measurement's "
                   "percentiles exceed these budgets (ms)")


def _samples_ms(benchmark: Any) -> Optional[List[float]]:
    """The per-round times (ms) pytest-benchmark measured; None when it measured nothing (disabled)."""
    stats = getattr(benchmark, "stats", None)
    if stats is None or not stats.stats.data:
        return None
    return [t * 1000.0 for t in stats.stats.data]


def _record(benchmark: Any, report: LatencyReport, budgets: dict, kind: str) -> None:
    """Put the percentiles the budgets name into pytest-benchmark's ``extra_info`` (its JSON output)."""
    for p in parse_budgets(budgets, kind):
        benchmark.extra_info[f"p{p:g}_ms"] = round(report.percentile(p), 4)
        if report.reference_ms:
            benchmark.extra_info[f"reference_p{p:g}_ms"] = round(report.percentile(p, True), 4)


def _not_measured(name: str) -> None:
    warnings.warn(f"{name}: pytest-benchmark measured nothing (--benchmark-disable?): latency gate not checked",
                  stacklevel=3)


class LatencyGate:
    """Latency checks on top of pytest-benchmark (see the module docstring); each returns what it measured and
    raises :class:`~.latency.LatencyBudgetExceeded` (an AssertionError) when a budget is exceeded."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reports: List[LatencyReport] = []

    def check(self, benchmark: Any, **budgets: float) -> Optional[LatencyReport]:
        """Absolute budgets (``p50_ms=...``) on what ``benchmark`` measured in this test."""
        samples = _samples_ms(benchmark)
        if samples is None:
            _not_measured(self.name)
            return None
        report = LatencyReport(self.name, samples)
        self.reports.append(report)
        _record(benchmark, report, budgets, "ms")
        check_budget(report, **budgets)
        return report

    def ratio(self, benchmark: Any, path: Callable[[], Any], reference: Callable[[], Any], *, rounds: int = 100,
              warmup_rounds: int = 5, **budgets: float) -> Optional[LatencyReport]:
        """Ratio budgets (``p50_ratio=...``): ``path`` timed by ``benchmark.pedantic`` for ``rounds`` rounds,
        ``reference`` timed once before each round, in the same run."""
        reference_ms: List[float] = []

        def time_reference() -> None:
            t0 = time.perf_counter()
            reference()
            reference_ms.append((time.perf_counter() - t0) * 1000.0)

        benchmark.pedantic(path, setup=time_reference, rounds=rounds, warmup_rounds=warmup_rounds)
        samples = _samples_ms(benchmark)
        if samples is None:
            _not_measured(self.name)
            return None
        report = LatencyReport(self.name, samples, reference_ms[warmup_rounds:])
        self.reports.append(report)
        _record(benchmark, report, budgets, "ratio")
        check_ratio(report, **budgets)
        return report


@pytest.fixture
def latency_gate(request: pytest.FixtureRequest) -> LatencyGate:
    return LatencyGate(request.node.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        if benchmark is None:
            pytest.fail(f"{item.nodeid}: @pytest.mark.{MARKER} needs the test to use pytest-benchmark's "
                        "`benchmark` fixture", pytrace=False)
        LatencyGate(item.nodeid).check(benchmark, **marker.kwargs)
    return result


@pytest.fixture(scope="session")
def medretrieve_collection(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from .collection import build_tiny_collection

    return build_tiny_collection(tmp_path_factory.mktemp("medretrieve") / "collection")


@pytest.fixture(scope="session")
def medretrieve_retriever(medretrieve_collection: Any) -> Any:
    from ..retrieval.retriever import Retriever

    return Retriever(medretrieve_collection)


__all__ = ["ensure_registered", "LatencyGate", "LatencyBudgetExceeded", "latency_gate", "medretrieve_collection",
           "medretrieve_retriever"]
