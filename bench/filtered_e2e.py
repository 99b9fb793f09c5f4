"""Filtered searches end to end on BioASQ 12b (issue 45): the closed corpus of the 12b golden files (every distinct
snippet a chunk), each document given a synthetic ``year`` (1990-2024) and ``publication_type`` (one or two of
eight MEDLINE types) drawn from its PMID's hash (the MEDLINE records of these articles are not available
offline), then the 12b questions searched through ``Retriever.search`` with filters of several selectivities, at
the default 300 ms deadline. For each filter: the share of chunks it keeps, p50 / p99 / max latency (ms), the
searches past the deadline, and whether every hit passed its filter (it must).

    nice python bench/filtered_e2e.py --queries 300                 # 12B1-12B3, 300 questions per filter
    nice python bench/filtered_e2e.py --files 12B1 --queries 100    # a quicker run
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bioasq_corpus import DATA, load_questions  # noqa: E402

TYPES = ("Journal Article", "Review", "Systematic Review", "Meta-Analysis", "Randomized Controlled Trial",
         "Case Reports", "Practice Guideline", "Observational Study")
#: the filters timed, from none (the unfiltered baseline) and the whole corpus to a sliver of it
FILTERS = (None, "year >= 1990", "year >= 2015", "publication_type in (Review, 'Systematic Review')",
           "year >= 2015 and publication_type in (Review, \"Randomized Controlled Trial\")",
           "year == 2003 and publication_type == 'Practice Guideline'")


def synthetic_fields(pmid: str) -> Dict[str, Any]:
    """A document's synthetic year and publication types, fixed by its id."""
    h = hashlib.sha256(pmid.encode()).digest()
    types = [TYPES[h[1] % len(TYPES)]]
    if h[2] % 3 == 0:
        types.append(TYPES[h[3] % len(TYPES)])
    return {"year": 1990 + h[0] % 35, "publication_type": sorted(set(types))}


def build(files: Sequence[Path], out: Path) -> Any:
    """The collection of the golden files' snippets with the synthetic fields, built once under ``out``."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.corpus.sources import read_records

    if (out / "manifest.json").is_file():
        return Collection.open(out)
    records = list(read_records([str(f) for f in files], format="bioasq"))
    for rec in records:
        rec.metadata.update(synthetic_fields(rec.id))
    t0 = time.perf_counter()
    col = Collection.build(records, out, encoder="default", progress=False)
    print(f"built {len(col)} chunks / {col.n_documents} documents in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return col


def passes(where: str, metadata: Dict[str, Any]) -> bool:
    """Whether a hit's metadata passes ``where``, decided apart from the engine (one document's columns)."""
    from medretrieve.corpus.metadata import MetadataColumns

    return bool(MetadataColumns([metadata], {"year": "integer", "publication_type": "keywords"}).mask(where)[0])


def run(col: Any, questions: Sequence[str], filters: Sequence[Optional[str]], deadline_ms: Optional[float] = 300.0
        ) -> List[Tuple[Optional[str], float, np.ndarray, int, int]]:
    """(filter, share of chunks kept, latencies ms, searches past deadline + 10 ms, hits failing) per filter
    (``deadline_ms`` None: no deadline, none late)."""
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(col)
    for q in questions[:5]:
        ret.search(q, k=10, deadline_ms=deadline_ms)
    out = []
    for where in filters:
        share = 1.0 if where is None else float(col.filter_rows(where).sum()) / max(len(col), 1)
        ret.search(questions[0], k=10, deadline_ms=deadline_ms, where=where)  # the filter compiled once
        lat, failing = [], 0
        for q in questions:
            t0 = time.perf_counter()
            res = ret.search(q, k=10, deadline_ms=deadline_ms, where=where)
            lat.append((time.perf_counter() - t0) * 1000)
            failing += 0 if where is None else sum(not passes(where, h.metadata) for h in res.hits)
        arr = np.asarray(lat)
        late = 0 if deadline_ms is None else int((arr > deadline_ms + 10).sum())
        out.append((where, share, arr, late, failing))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", default="12B1,12B2,12B3", help="golden files (short names) forming the corpus")
    ap.add_argument("--queries", type=int, default=300, help="questions searched per filter")
    ap.add_argument("--deadline-ms", type=float, default=300.0)
    ap.add_argument("--work", default="/tmp/medretrieve-bench-filtered", help="where the collection is built "
                    "(kept between runs)")
    args = ap.parse_args()
    files = [DATA / f"{name}_golden.json" for name in args.files.split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    col = build(files, work / f"filtered-e2e-{args.files.replace(',', '-').lower()}")
    bodies = [q["body"] for q in load_questions("12B")]
    questions = [bodies[i % len(bodies)] for i in range(args.queries)]
    print(f"\nFiltered search end to end: BioASQ {args.files} closed corpus, {len(col)} chunks "
          f"({col.n_documents} documents), synthetic year / publication_type, {len(questions)} questions per "
          f"filter, k=10, deadline {args.deadline_ms:g} ms\n")
    print("| filter | chunks kept | p50 ms | p99 ms | max ms | past deadline | hits failing the filter |")
    print("|---|---|---|---|---|---|---|")
    for where, share, lat, late, failing in run(col, questions, FILTERS, args.deadline_ms):
        name = "none (the baseline)" if where is None else f"`{where}`"
        print(f"| {name} | {share:.1%} | {np.percentile(lat, 50):.1f} | {np.percentile(lat, 99):.1f} | "
              f"{lat.max():.1f} | {late} | {failing} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
