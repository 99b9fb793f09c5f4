"""The small corpus and questions of the distributed tests, and their fixtures: a local Ray cluster (2 CPUs, shut
down at the end of the session) and the corpus built as two shards and as one collection of the shards
concatenated. Test modules import the fixtures by name (a conftest.py here would shadow tests/conftest.py, which
other tests import as ``conftest``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from ray_start import start_local_ray

_BUILT: Dict[str, Any] = {}

TOPICS = ["metformin lowers glucose in type 2 diabetes", "allopurinol lowers serum urate in gout",
          "inhaled corticosteroids reduce asthma exacerbations", "triptans treat acute migraine attacks",
          "statins lower LDL cholesterol and cardiovascular risk", "IL-6 drives the acute phase response",
          "aspirin inhibits platelet aggregation", "BRCA1 mutations raise breast cancer risk"]
QUESTIONS = ["What lowers glucose in type 2 diabetes?", "Which drugs treat gout?", "Is aspirin an antiplatelet drug?",
             "List treatments of asthma exacerbations", "BRCA1 and breast cancer risk", "What does IL-6 drive?",
             "How are migraine attacks treated?"]


def corpus_records() -> List[Dict]:
    """60 documents of two sections, each mixing three of the topics (so BM25 and dense rank them apart)."""
    return [{"id": f"d{i}", "title": f"Note {i} on {TOPICS[i % 8].split()[0]}",
             "sections": [{"title": "Treatment", "text": f"{TOPICS[i % 8]} in patient group {i}; {TOPICS[(i * 3) % 8]}."},
                          {"title": "Background",
                           "text": f"Study {i}: {TOPICS[(i + 1) % 8]} and {TOPICS[(i + 5) % 8]} were compared."}]}
            for i in range(60)]


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():  # each test module imports this fixture: the first one starts Ray
        start_local_ray(ray)
    yield ray
    try:
        from ray import serve

        serve.shutdown()
    except Exception:  # Serve was never started
        pass
    ray.shutdown()


@pytest.fixture(scope="session")
def encoder_dir():
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


@pytest.fixture(scope="session")
def sharded_corpus(tmp_path_factory, encoder_dir):
    """(shard directories, the one-collection directory, records per shard): float32 indexes, so the dense
    scores of shards and of the one collection are the same numbers."""
    if "sharded" in _BUILT:  # built once per session, whichever module asks first
        return _BUILT["sharded"]
    work: Path = tmp_path_factory.mktemp("sharded")
    records = corpus_records()
    dirs, parts = _build_split(records, 2, work, encoder_dir)
    _BUILT["sharded"] = dirs, work / "one", parts
    return _BUILT["sharded"]


JOURNAL_SHARD = 0  # only this shard's documents carry a journal: the other shards' schemas lack the field


def metadata_records(shards: int) -> List[Dict]:
    """The corpus with document metadata: a year, publication types, every seventh article retracted, and a
    journal on the documents of shard ``JOURNAL_SHARD`` only (a field some shards lack)."""
    from medretrieve.distributed.layout import shard_of

    types = [["Review"], ["Randomized Controlled Trial"], ["Case Reports"], ["Review", "Meta-Analysis"]]
    out = []
    for i, rec in enumerate(corpus_records()):
        rec = {**rec, "year": 2000 + i % 20, "publication_type": types[i % 4], "retracted": i % 7 == 3}
        if shard_of(rec["id"], shards) == JOURNAL_SHARD:
            rec["journal"] = ["Lancet", "BMJ"][i % 2]
        out.append(rec)
    return out


@pytest.fixture(scope="session")
def metadata_corpus(tmp_path_factory, encoder_dir):
    """(three shard directories, the one-collection directory of the shards concatenated) of
    :func:`metadata_records`, float32 indexes."""
    if "metadata" in _BUILT:
        return _BUILT["metadata"]
    work: Path = tmp_path_factory.mktemp("metadata")
    records = metadata_records(3)
    dirs, _ = _build_split(records, 3, work, encoder_dir)
    _BUILT["metadata"] = dirs, work / "one"
    return _BUILT["metadata"]


def _build_split(records: List[Dict[str, Any]], shards: int, work: Path, encoder_dir: Any) -> Tuple[List[Path], list]:
    """``records`` split by :func:`shard_of` into ``work/shard{i}`` collections and whole into ``work/one`` (float32,
    so sharded and single searches compare exactly); (shard directories, the records of each shard)."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.distributed.layout import shard_of

    parts = [[r for r in records if shard_of(r["id"], shards) == s] for s in range(shards)]
    dirs = []
    for s, part in enumerate(parts):
        Collection.build(part, work / f"shard{s}", encoder=encoder_dir, progress=False, dtype="float32")
        dirs.append(work / f"shard{s}")
    Collection.build([r for p in parts for r in p], work / "one", encoder=encoder_dir, progress=False,
                     dtype="float32")
    return dirs, parts
