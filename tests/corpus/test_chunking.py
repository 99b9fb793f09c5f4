"""Chunking: sentence splitting, hierarchical cuts, adaptive overlap, parent links."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medretrieve.corpus.chunking import (
    CATEGORY_IDS,
    ChunkingConfig,
    chunk_record,
    chunk_section,
    count_tokens,
    overlap_weights,
    section_category,
    section_label,
    split_sentences,
)
from medretrieve.corpus.sources import Record, Section


def test_sentence_splitter_survives_biomedical_abbreviations():
    text = ("Aspirin (approx. 75 mg) lowers risk, e.g. in diabetes, i.e. in most adults. Smith et al. gave "
            "2.5 mg vs. placebo. See Fig. 2 for the U.S. data from Dr. Jones. The dose was 10 mg. "
            "It worked! Did it? J. Smith agreed.")
    assert split_sentences(text) == [
        "Aspirin (approx. 75 mg) lowers risk, e.g. in diabetes, i.e. in most adults.",
        "Smith et al. gave 2.5 mg vs. placebo.",
        "See Fig. 2 for the U.S. data from Dr. Jones.",
        "The dose was 10 mg.",
        "It worked!",
        "Did it?",
        "J. Smith agreed.",
    ]
    assert split_sentences("   ") == []


def test_count_tokens_estimate():
    assert count_tokens("") == 0
    assert count_tokens("IL-6 levels.") == 5  # il - 6 levels .
    assert count_tokens("pembrolizumab") == 2  # 13 chars: one extra piece
    assert count_tokens("a b c") == 3


def _long(sentence: str, n: int) -> str:
    return " ".join(f"{sentence} number {i}." for i in range(n))


def test_short_section_is_never_split():
    cfg = ChunkingConfig(max_tokens=50)
    text = "A short section. It has two sentences."
    assert chunk_section(text, "Treatment", cfg) == [("", text)]


@pytest.mark.parametrize("title,ratio", [("Results", 0.30), ("Differential diagnosis", 0.50)])
def test_adaptive_overlap_and_limits(title, ratio):
    cfg = ChunkingConfig(max_tokens=60)
    text = _long("The patient had a fever and a cough", 30)
    parts = chunk_section(text, title, cfg)
    assert len(parts) > 2
    assert parts[0][0] == ""
    budget = round(ratio * cfg.max_tokens)
    for ov, core in parts:
        assert count_tokens(ov) <= budget
        assert count_tokens(ov) + count_tokens(core) <= cfg.max_tokens
    overlaps = [count_tokens(ov) for ov, _ in parts[1:]]
    assert min(overlaps) >= budget * 0.5  # whole sentences fill most of the overlap budget
    # nothing lost, nothing reordered: the cores put back together are the text
    assert " ".join(core for _, core in parts) == " ".join(text.split())
    # each overlap is the tail of the previous core
    for (_, prev), (ov, _) in zip(parts, parts[1:]):
        assert prev.endswith(ov)


def test_no_overlap_under_min_tokens_and_list_sections_are_complex():
    cfg = ChunkingConfig(max_tokens=20, overlap_min_tokens=100)
    text = _long("Short", 8)  # > 20 tokens, < 100
    assert all(ov == "" for ov, _ in chunk_section(text, "Results", cfg))
    items = "\n".join(f"- item {i} is a drug with a long name and effect" for i in range(12))
    cfg2 = ChunkingConfig(max_tokens=60, overlap_min_tokens=10)
    parts = chunk_section(items, "Notes", cfg2)
    assert max(count_tokens(ov) for ov, _ in parts) > round(0.30 * 60)  # the complex (50%) budget


def test_long_sentence_is_cut_by_words():
    cfg = ChunkingConfig(max_tokens=16, overlap=0.0, overlap_min_tokens=0)
    text = " ".join(f"w{i}" for i in range(100))
    parts = chunk_section(text, "", cfg)
    assert all(count_tokens(c) <= 16 for _, c in parts)
    assert " ".join(c for _, c in parts) == text


def test_chunk_record_ids_parents_labels_and_metadata():
    rec = Record("doc1", "Title", [Section("Treatment", _long("Metformin is first line", 40)),
                                   Section("Background", "Short background.")], {"year": 2020})
    chunks, parts = chunk_record(rec, ChunkingConfig(max_tokens=64))
    assert [p.section_id for p in parts] == ["doc1#s0", "doc1#s1"]
    assert parts[1].text == "Short background."
    assert all(c.parent_id == "doc1#s0" for c in chunks[:-1]) and chunks[-1].parent_id == "doc1#s1"
    assert chunks[0].chunk_id == "doc1#s0.0" and chunks[-1].chunk_id == "doc1#s1.0"
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert chunks[0].label == CATEGORY_IDS["treatment"] and chunks[-1].label == CATEGORY_IDS["background"]
    assert all(c.metadata == {"year": 2020} and c.title == "Title" for c in chunks)
    assert chunks[1].text.startswith(chunks[1].overlap_text) and chunks[1].text.endswith(chunks[1].core_text)


def test_overlap_weights():
    rec = Record("d", "", [Section("Results", _long("Alpha beta gamma delta", 40))])
    chunks, _ = chunk_record(rec, ChunkingConfig(max_tokens=40))
    assert overlap_weights(chunks[0]) == (1.0, 0.0)
    wc, wo = overlap_weights(chunks[1], 0.5)
    assert wc + wo == pytest.approx(1.0) and 0 < wo < wc
    assert overlap_weights(chunks[1], 0.0) == (1.0, 0.0)


def test_section_categories():
    assert section_category("Treatment and management") == "treatment"
    assert section_category("Differential diagnosis") == "diagnosis"
    assert section_category("") == "" and section_label("Acknowledgements") == 0


def test_config_validation():
    with pytest.raises(ValueError):
        ChunkingConfig(max_tokens=2)
    with pytest.raises(ValueError):
        ChunkingConfig(overlap=0.9)
    with pytest.raises(ValueError, match="complex_title_pattern"):
        ChunkingConfig(complex_title_pattern="(unclosed")
    assert ChunkingConfig.from_dict(ChunkingConfig(max_tokens=99).to_dict()).max_tokens == 99


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["Fever.", "The dose was 2.5 mg.", "See Fig. 2 e.g. here.", "IL-6 rose",
                                 "\n\n", "a very long multisyllabic biomedical terminology word"]),
                min_size=1, max_size=80),
       st.integers(min_value=12, max_value=80))
def test_chunk_invariants(pieces, max_tokens):
    text = " ".join(pieces)
    if not text.strip():
        return
    cfg = ChunkingConfig(max_tokens=max_tokens)
    parts = chunk_section(text, "Results", cfg)
    assert " ".join(c for _, c in parts) == " ".join(text.split())
    if count_tokens(text) > max_tokens:
        for ov, core in parts:
            assert count_tokens(ov) + count_tokens(core) <= max_tokens
