"""The pytest plugin, run in a pytester session as users run it: the latency_budget marker, the latency_gate
fixture (absolute and ratio budgets), the tiny-collection fixtures, and its pytest11 entry point."""
from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytest.importorskip("pytest_benchmark")
# an installed package registers the plugin through its pytest11 entry point (naming it again would register it
# twice); a source checkout run with PYTHONPATH names it
INSTALLED = any(ep.value == "medretrieve.testing.plugin" for ep in metadata.entry_points(group="pytest11"))
PLUGIN = ([] if INSTALLED else ["-p", "medretrieve.testing.plugin"]) + ["-p", "no:cacheprovider"]


def test_marker_passes_within_budget_and_fails_over_it(pytester):
    pytester.makepyfile("""
        import time
        import pytest

        @pytest.mark.latency_budget(p50_ms=5000, p99_ms=5000)
        def test_fast(benchmark):
            benchmark.pedantic(lambda: None, rounds=100)

        @pytest.mark.latency_budget(p50_ms=0.001)
        def test_slow(benchmark):
            benchmark.pedantic(time.sleep, args=(0.002,), rounds=10)

        @pytest.mark.latency_budget(p50_ms=1)
        def test_without_benchmark():
            pass
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*LatencyBudgetExceeded*test_slow*p50 *ms > budget 0.001 ms*",
                                 "*test_without_benchmark*needs the test to use pytest-benchmark*"])


def test_gate_fixture_absolute_and_ratio(pytester):
    pytester.makepyfile("""
        import time

        def test_absolute(benchmark, latency_gate):
            benchmark.pedantic(lambda: None, rounds=50)
            report = latency_gate.check(benchmark, p50_ms=5000)
            assert report.percentile(50) < 5000

        def test_ratio_slower_path_fails(benchmark, latency_gate):
            latency_gate.ratio(benchmark, lambda: time.sleep(0.003), lambda: None, rounds=20, p50_ratio=2)

        def test_ratio_faster_path_passes(benchmark, latency_gate):
            report = latency_gate.ratio(benchmark, lambda: None, lambda: time.sleep(0.002), rounds=20,
                                        p50_ratio=1)
            assert len(report.reference_ms) == 20 and min(report.reference_ms) >= 2.0
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_ratio_slower_path_fails*p50 ratio * > budget 2*"])


def test_gates_are_not_checked_when_benchmarks_are_disabled(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.latency_budget(p50_ms=0.000001)
        def test_marker(benchmark):
            benchmark(lambda: None)

        def test_fixture(benchmark, latency_gate):
            benchmark(lambda: None)
            assert latency_gate.check(benchmark, p50_ms=0.000001) is None
    """)
    result = pytester.runpytest(*PLUGIN, "--benchmark-disable")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*latency gate not checked*"])


def test_tiny_collection_fixtures(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.latency_budget(p50_ms=60000)
        def test_search(benchmark, medretrieve_retriever, medretrieve_collection):
            res = benchmark.pedantic(medretrieve_retriever.search, args=("treatment of type 2 diabetes",),
                                     rounds=3)
            assert res.hits[0].document_id == "demo-002"
            assert medretrieve_collection.n_documents == 24
    """)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)


def test_the_plugin_is_declared_as_a_pytest11_entry_point():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"]["medretrieve"] == "medretrieve.testing.plugin"
    assert {"fastapi", "prometheus-client"} <= {d.split(">")[0].split("[")[0] for d in
                                                project["optional-dependencies"]["serve"]}
