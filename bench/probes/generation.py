"""Cost of the answer step around the LLM call (everything but the model's own time).

Measures, in one run on the same inputs (10 BioASQ-sized sources of ~1,500 chars,
a 5-sentence cited answer):
- building the cite prompt, parsing replies (BioASQ, MedRGB JSON);
- citation verification, lexical only vs lexical + semantic (the embedded
  int8 MiniLM encoder): the price of the semantic check, as a ratio;
- one OpenAIBackend round trip to the local fake server (HTTP + JSON on loopback).

Usage: ``MEDRETRIEVE_CORE_DIR=build/dev PYTHONPATH=python:tests/support nice python bench/probes/generation.py``
Prints a markdown table (median of repeated runs, ms) for bench/RESULTS.md.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))

from llm_server import FakeLLMServer  # noqa: E402

from medretrieve.generation.citations import verify_citations  # noqa: E402
from medretrieve.generation.llm import OpenAIBackend  # noqa: E402
from medretrieve.evaluation.medrgb.parsers import parse_medrgb  # noqa: E402
from medretrieve.generation.parsers import parse_bioasq  # noqa: E402
from medretrieve.generation.prompts import cite_messages  # noqa: E402

SENTENCE = ("Baloxavir marboxil was approved in 2018 for acute uncomplicated influenza in patients aged 12 years "
            "and older, and it inhibits the cap-dependent endonuclease of the viral polymerase. ")
SOURCES = [{"title": f"Source {i}", "text": (SENTENCE * 8)[:1500]} for i in range(10)]
ANSWER = (
    "Baloxavir was approved in 2018 for uncomplicated influenza [1]. "
    "It inhibits the cap-dependent endonuclease [2][3]. "
    "Sources [4] and [5] agree that patients aged 12 and older can take it [4][5]. "
    "It causes severe liver failure [6]. "
    "A single dose is enough for most patients [7]."
)
BIOASQ_REPLY = "EXACT: baloxavir | oseltamivir | zanamivir\nIDEAL: Baloxavir is a cap-dependent endonuclease inhibitor."
MEDRGB_REPLY = ('```json\n{"relevant_documents": [1, 3], "step_by_step_thinking": "Doc 1 says so.", '
                '"answer_choice": "B"}\n```')


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (imports, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    rows = [
        ("cite prompt, 10 sources", median_ms(lambda: cite_messages("Is baloxavir approved?", SOURCES), 200)),
        ("parse_bioasq (factoid)", median_ms(lambda: parse_bioasq(BIOASQ_REPLY, "factoid"), 500)),
        ("parse_medrgb (sufficiency JSON)", median_ms(lambda: parse_medrgb(MEDRGB_REPLY, "sufficiency",
                                                                           ["a", "b", "c", "d"]), 500)),
    ]
    lexical = median_ms(lambda: verify_citations(ANSWER, SOURCES), 100)
    rows.append(("verify_citations, lexical", lexical))
    try:
        from medretrieve.models.encoders import QueryEncoder, default_model_dir

        encoder = QueryEncoder.from_dir(default_model_dir(), threads=1)
        semantic = median_ms(lambda: verify_citations(ANSWER, SOURCES, encoder=encoder), 20)
        rows.append(("verify_citations, lexical + semantic (MiniLM int8, 1 thread)", semantic))
    except ImportError as exc:
        semantic = None
        print(f"(semantic check skipped: {exc})", file=sys.stderr)
    with FakeLLMServer(lambda req: BIOASQ_REPLY) as srv, OpenAIBackend(srv.base_url, "fake") as backend:
        msgs = cite_messages("Is baloxavir approved?", SOURCES)
        rows.append(("OpenAIBackend round trip, loopback fake server",
                     median_ms(lambda: backend.generate(msgs), 100)))
    print("| step | median ms |\n| --- | ---: |")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")
    if semantic is not None:
        print(f"\nsemantic / lexical verification time: {semantic / lexical:.1f}x")


if __name__ == "__main__":
    main()
