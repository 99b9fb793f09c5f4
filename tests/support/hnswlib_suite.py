"""Runs hnswlib's own Python tests against medretrieve's drop-in, unchanged, the way hnswlib runs them
(``unittest discover --pattern "bindings_test*.py"``), with ``import hnswlib`` resolved to a shim module whose
``Index`` is ``medretrieve.Index`` and whose ``BFIndex`` is ``medretrieve.BFIndex``.

usage: python tests/support/hnswlib_suite.py DIR   (DIR holds bindings_test*.py; fetch_hnswlib_tests.sh fills it)

The tests write index files into the working directory: they run in a temporary one. Exits 0 only when every test
passed, at least one ran and every test module imported the shim.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import types
import unittest
from typing import Any, Dict


class TimedResult(unittest.TextTestResult):
    """Records each test's wall time (seconds), printed after the run: the suite's cost in CI."""

    seconds: Dict[str, float] = {}

    def startTest(self, test: Any) -> None:
        self._started = time.perf_counter()
        super().startTest(test)

    def stopTest(self, test: Any) -> None:
        super().stopTest(test)
        self.seconds[test.id()] = time.perf_counter() - self._started


def install_shim() -> types.ModuleType:
    import medretrieve

    shim = types.ModuleType("hnswlib", "medretrieve's hnswlib drop-in: Index and BFIndex")
    shim.Index = medretrieve.Index  # type: ignore[attr-defined]
    shim.BFIndex = medretrieve.BFIndex  # type: ignore[attr-defined]
    sys.modules["hnswlib"] = shim
    return shim


def main(folder: str) -> int:
    folder = os.path.abspath(folder)
    shim = install_shim()
    suite = unittest.defaultTestLoader.discover(folder, pattern="bindings_test*.py", top_level_dir=folder)
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        result = unittest.TextTestRunner(verbosity=2, resultclass=TimedResult).run(suite)
    for name, seconds in sorted(TimedResult.seconds.items(), key=lambda item: -item[1]):
        print(f"{seconds:8.1f} s  {name}")
    modules = [m for name, m in sys.modules.items() if name.startswith("bindings_test")]
    not_shimmed = [m.__name__ for m in modules if getattr(m, "hnswlib", shim) is not shim]
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    print(f"{result.testsRun - failed - len(result.skipped)} passed, {failed} failed, {len(result.skipped)} skipped")
    if not_shimmed:
        print(f"these modules imported another hnswlib: {not_shimmed}")
    return 0 if result.testsRun and not failed and modules and not not_shimmed else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
