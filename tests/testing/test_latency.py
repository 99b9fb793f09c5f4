"""Latency budgets on synthetic samples: parsing, percentiles, absolute and ratio checks, their messages."""
from __future__ import annotations

import pytest

from medretrieve.testing.latency import LatencyBudgetExceeded, LatencyReport, check_budget, check_ratio, parse_budgets

SAMPLES = [float(i) for i in range(1, 101)]  # 1..100 ms


def test_parse_budgets():
    assert parse_budgets({"p50_ms": 20, "p99.9_ms": 80}, "ms") == {50.0: 20.0, 99.9: 80.0}
    for bad, match in (({"p50": 1}, "unknown"), ({"p50_ratio": 1}, "unknown"), ({"p150_ms": 1}, "unknown"),
                       ({"p50_ms": 0}, "> 0"), ({"p50_ms": True}, "> 0"), ({}, "at least one")):
        with pytest.raises(ValueError, match=match):
            parse_budgets(bad, "ms")


def test_check_budget_passes_and_lists_every_percentile_over():
    report = LatencyReport("search", SAMPLES)
    assert check_budget(report, p50_ms=60, p99_ms=100) == {"p50": pytest.approx(50.5), "p99": pytest.approx(99.01)}
    with pytest.raises(LatencyBudgetExceeded) as info:
        check_budget(report, p50_ms=10, p90_ms=95, p99_ms=50)
    msg = str(info.value)
    assert "p50 50.50 ms > budget 10 ms" in msg and "p99 99.01 ms > budget 50 ms" in msg
    assert "p90" not in msg.split("[")[0]  # within its budget: not listed
    assert isinstance(info.value, AssertionError)


def test_check_ratio_against_the_reference():
    report = LatencyReport("http", [x * 1.5 for x in SAMPLES], reference_ms=SAMPLES)
    assert check_ratio(report, p50_ratio=1.6)["p50"] == pytest.approx(1.5)
    with pytest.raises(LatencyBudgetExceeded, match="p50 ratio 1.50 > budget 1.2"):
        check_ratio(report, p50_ratio=1.2)


def test_a_p99_from_few_rounds_warns():
    with pytest.warns(UserWarning, match="too few for a p99 budget"):
        check_budget(LatencyReport("x", SAMPLES[:20]), p99_ms=1000)
