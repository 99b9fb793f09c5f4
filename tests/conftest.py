"""Shared test fixtures: paths to the public data beside the project."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
# Helpers shared by several test files (fake servers, fixtures, native child runs) live in tests/support.
sys.path.insert(0, str(TESTS_DIR / "support"))

# default_model_dir() assembles the embedded model into a cache folder: keep the test session's copy out of the
# user's ~/.cache, in a folder of the session's own, removed when the session ends (a folder the caller named is
# left alone).
SESSION_CACHE = None
if "MEDRETRIEVE_CACHE_DIR" not in os.environ:
    SESSION_CACHE = tempfile.mkdtemp(prefix="medretrieve-test-cache-")
    os.environ["MEDRETRIEVE_CACHE_DIR"] = SESSION_CACHE


def pytest_configure(config: pytest.Config) -> None:
    # the package's pytest plugin (fixtures medretrieve_collection / latency_gate), when no pytest11 entry point
    # registered it (a checkout that is not pip-installed)
    from medretrieve.testing.plugin import ensure_registered

    ensure_registered(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION_CACHE is not None:
        shutil.rmtree(SESSION_CACHE, ignore_errors=True)


SHARED_DATA = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that need it are skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def bioasq_files(shared_data: Path) -> list:
    files = sorted((shared_data / "bioasq").glob("7B*_golden.json"))
    if not files:
        pytest.skip("no BioASQ golden files in shared data")
    return files


@pytest.fixture(scope="session")
def demo_collection_dir(tmp_path_factory) -> Path:
    """The demo corpus built once per test session with the embedded model (a collection directory)."""
    from medretrieve.cli.demo import DEMO_CORPUS
    from medretrieve.corpus.collection import Collection

    out = tmp_path_factory.mktemp("demo-collection") / "demo"
    Collection.build(DEMO_CORPUS, out, encoder="default", progress=False)
    return out


# ------------------------------------------------------------------ a real server (tests/server, tests/client)

CITED_ANSWER = ("Metformin is the first-line drug for type 2 diabetes ", "[1].")


def _llm_reply(request_json):
    from llm_server import stream_reply

    if request_json and request_json.get("stream"):
        return stream_reply(CITED_ANSWER)
    return "".join(CITED_ANSWER)


@pytest.fixture(scope="session")
def fake_llm():
    """A scripted OpenAI-compatible server that answers (streamed or not) with one cited sentence."""
    from llm_server import FakeLLMServer

    with FakeLLMServer(_llm_reply) as srv:
        yield srv


@pytest.fixture(scope="session")
def server(medretrieve_collection, fake_llm):
    """``medretrieve serve`` over the plugin's tiny collection, one worker, answers through ``fake_llm``."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from medretrieve.testing.server import ServerProcess

    with ServerProcess(medretrieve_collection.directory,
                       ["--llm", fake_llm.base_url, "--model", "fake-model", "--max-inflight", "2"]) as srv:
        yield srv
