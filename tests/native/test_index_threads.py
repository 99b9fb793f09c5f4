"""Thread counts: an absurd num_threads is capped at the hardware threads, and a thread the system refuses to
create leaves the work to the threads already running, so the call still returns the right answer.

Before, num_threads=2000 over 3000 queries under a 3 GiB address space aborted the interpreter ("terminate called
without an active exception"): a failed thread creation left joinable threads behind. The cases run in a child
process.
"""
from __future__ import annotations

import pytest

from native_child import describe, run_python

GIB = 1 << 30

SETUP = """
import numpy as np, medretrieve
x = np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32)
"""

CASES = {
    # Searches: the answer with 2000 threads asked for equals the single-threaded one.
    "Index.search": "idx = medretrieve.Index('l2', 16); idx.init_index(3000, M=8, ef_construction=40); "
    "idx.add(x); want = idx.search(x, 3, num_threads=1); got = idx.search(x, 3, num_threads=2000)",
    "knn_query": "idx = medretrieve.Index('l2', 16); idx.init_index(3000, M=8, ef_construction=40); idx.add(x); "
    "want = idx.knn_query(x, 3, num_threads=1); got = idx.knn_query(x, 3, num_threads=2000)",
    "FlatIndex.search": "idx = medretrieve.FlatIndex('l2', 16, dtype='int8'); idx.add(x); "
    "want = idx.search(x, 3, num_threads=1); got = idx.search(x, 3, num_threads=2000)",
    "mmr_batch": "c = [x[i:i + 20] for i in range(2500)]; r = [-np.arange(20, dtype=np.float32)] * 2500; "
    "want = medretrieve.mmr_batch(None, c, 5, relevances=r, threads=1); "
    "got = medretrieve.mmr_batch(None, c, 5, relevances=r, threads=2000)",
    # Adds: every row goes in (each finds itself), the same as a FlatIndex filled one thread at a time.
    "Index.add": "idx = medretrieve.Index('l2', 16); idx.init_index(3000, M=8, ef_construction=40, dtype='int8'); "
    "idx.add(x, num_threads=2000); want = [3000, 3000]; "
    "got = [idx.element_count, int((idx.search(x, 1, ef=64)[0][:, 0] == np.arange(3000)).sum() >= 2970) * 3000]",
    "FlatIndex.add": "idx = medretrieve.FlatIndex('ip', 16, dtype='int8'); idx.add(x, num_threads=2000); "
    "ref = medretrieve.FlatIndex('ip', 16, dtype='int8'); ref.add(x, num_threads=1); "
    "want = ref.search(x[:50], 5); got = idx.search(x[:50], 5)",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_absurd_thread_counts_give_the_right_answer(case: str) -> None:
    proc = run_python(
        SETUP + CASES[case] + "\nprint('same' if repr(want) == repr(got) else f'differ: {want!r} {got!r}'[:2000])\n",
        address_space=3 * GIB,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "same", describe(proc)
