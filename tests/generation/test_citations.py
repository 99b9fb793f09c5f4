"""Citation checks: each [n] must name a provided source and the source must support the sentence."""
from __future__ import annotations

import numpy as np
import pytest

from medretrieve.generation import citations as C
from medretrieve.generation import generate


def test_generate_re_exports_citations():
    assert generate.verify_citations is C.verify_citations and generate.Citation is C.Citation


SOURCES = [
    "Baloxavir marboxil was approved by the FDA in 2018 for acute uncomplicated influenza in patients aged 12 "
    "years and older.",
    {"title": "Mechanism", "text": "Baloxavir inhibits the cap-dependent endonuclease of the influenza polymerase."},
    "Oseltamivir is a neuraminidase inhibitor used for influenza treatment and prophylaxis.",
]


def test_verify_citations_supported_unsupported_and_out_of_range():
    answer = (
        "Baloxavir was approved by the FDA in 2018 for uncomplicated influenza [1]. "
        "It inhibits the cap-dependent endonuclease [2]. "
        "Baloxavir and oseltamivir both treat influenza by different mechanisms [2][3]. "
        "Baloxavir causes severe liver failure in children [1]. "
        "It is also approved for COVID-19 [7]. "
        "Patients should take it with milk."
    )
    cites = C.verify_citations(answer, SOURCES)
    assert [c.sources for c in cites] == [[1], [2], [2, 3], [1], [7], []]
    assert [c.supported for c in cites] == [True, True, True, False, False, False]
    assert cites[0].support_score >= C.SUPPORT_THRESHOLD
    assert cites[3].support_score < C.SUPPORT_THRESHOLD and "liver" in cites[3].reason
    assert cites[4].invalid_sources == [7] and "only 3 sources" in cites[4].reason
    assert cites[5].reason == "no citation"


def test_verify_citations_marker_forms_and_sentence_splitting():
    answer = ("Baloxavir, e.g. as Xofluza, was approved in 2018. [1] "
              "Both [1] and [2] report that baloxavir inhibits influenza [1, 2]. "
              "It targets the endonuclease [1-2].")
    cites = C.verify_citations(answer, SOURCES)
    assert len(cites) == 3
    assert cites[0].sentence.startswith("Baloxavir, e.g. as Xofluza") and cites[0].sources == [1]
    assert cites[1].sources == [1, 2] and cites[1].supported  # "report" is not counted as a claim word
    assert cites[2].sources == [1, 2] and cites[2].supported


def test_verify_citations_threshold_and_options():
    answer = "Baloxavir treats influenza in hospitals [1]."
    strict = C.verify_citations(answer, SOURCES, threshold=1.0)
    lax = C.verify_citations(answer, SOURCES, threshold=0.3)
    assert not strict[0].supported and lax[0].supported
    assert C.verify_citations("Insufficient information about dosing.", SOURCES) == []
    assert C.verify_citations("An uncited claim.", SOURCES, require_citations=False) == []
    with pytest.raises(ValueError, match="threshold"):
        C.verify_citations(answer, SOURCES, threshold=2)
    with pytest.raises(TypeError):
        C.verify_citations(None, SOURCES)


class _KeywordEncoder:
    """Deterministic bag-of-concepts encoder: paraphrases of the same concept map to the same axis."""

    AXES = [("flu", "influenza", "grippe"), ("approved", "licensed", "authorised", "authorized"),
            ("liver", "hepatic"), ("baloxavir", "xofluza")]

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.AXES)), dtype=np.float32)
        for i, t in enumerate(texts):
            low = t.lower()
            for j, words in enumerate(self.AXES):
                out[i, j] = sum(low.count(w) for w in words)
        return out


def test_verify_citations_semantic_score_rescues_paraphrase():
    answer = "Xofluza is licensed against the grippe [1]."
    lexical = C.verify_citations(answer, SOURCES)
    semantic = C.verify_citations(answer, SOURCES, encoder=_KeywordEncoder())
    assert not lexical[0].supported
    assert semantic[0].supported and semantic[0].support_score >= C.SEMANTIC_THRESHOLD
    assert "cosine" in semantic[0].reason
    off_topic = C.verify_citations("Hepatic damage is common [1].", SOURCES, encoder=_KeywordEncoder())
    assert not off_topic[0].supported


def test_split_sentences():
    text = "First claim [1]. Second, e.g. this one, is longer [2].\n- A bullet point [3]\n[1] and [2] agree on it."
    assert C.split_sentences(text) == ["First claim [1].", "Second, e.g. this one, is longer [2].",
                                       "A bullet point [3]", "[1] and [2] agree on it."]
