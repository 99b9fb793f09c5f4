"""The benchmark scripts' own tests (tests/bench) load a script of bench/ as a module: they are scripts, not a
package."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(name: str) -> ModuleType:
    """``bench/NAME.py`` as the module ``bench_NAME`` (registered, so dataclasses and pickling find it), with bench/
    on the path for the helpers it imports beside it (``bioasq_corpus``, ``datagen``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
