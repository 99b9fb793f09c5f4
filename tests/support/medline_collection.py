"""The MEDLINE fixture whose records carry metadata (tests/fixtures/medline/filters_sample.xml) built into a
collection, and an app over it ready to answer: what the filter tests of each door (Python, HTTP, client, CLI, MCP)
search."""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"
QUESTION = "Is metformin the first-line drug for type 2 diabetes?"
READY_S = 120  # seconds the app may take to load the collection


def build_medline_collection(tmp_path_factory: Any) -> Path:
    """The fixture built with the default encoder into a fresh temporary directory; its path."""
    from medretrieve.corpus.collection import Collection

    out = tmp_path_factory.mktemp("medline") / "col"
    Collection.build(str(MEDLINE), out, "default", progress=False)
    return out


@contextmanager
def ready_test_client(directory: Path) -> Iterator[Any]:
    """A FastAPI TestClient over the server app of ``directory``, once ``/readyz`` says it is loaded."""
    from fastapi.testclient import TestClient

    from medretrieve.server.app import create_app

    with TestClient(create_app(str(directory))) as client:
        deadline = time.monotonic() + READY_S
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the collection did not load"
            time.sleep(0.1)
        yield client
