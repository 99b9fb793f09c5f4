"""The wire format (medretrieve.wire): its section names are the chunker's, its deadline header follows the body
field's rule, and a compact record reads back."""
from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from medretrieve.corpus.chunking import SECTION_CATEGORIES
from medretrieve.records import Answer, Citation, Hit, SearchResult, StageInfo
from medretrieve.retrieval.candidates import OTHER_SECTION
from medretrieve.wire import (MAX_DEADLINE_MS, SECTIONS, WORD_PATTERN, SearchRequest, WordedQuestion,
                             deadline_header_ms)


def test_sections_are_the_chunkers_categories():
    assert SECTIONS == tuple(name for name, _ in SECTION_CATEGORIES) + (OTHER_SECTION,)


@pytest.mark.parametrize("raw", ["0", "-5", "600001", "nan", "inf", "soon", "", "1e5000"])
def test_the_deadline_header_is_checked_as_the_body_field(raw):
    with pytest.raises(ValidationError) as header:
        deadline_header_ms(raw)
    try:
        float(raw)
    except ValueError:
        return  # not a number: the body field (strict JSON) cannot even hold it
    with pytest.raises(ValidationError) as body:
        SearchRequest.model_validate({"question": "q", "deadline_ms": float(raw)})
    assert header.value.errors()[0]["msg"] == body.value.errors()[0]["msg"]


def test_the_deadline_header_accepts_what_the_body_accepts():
    assert deadline_header_ms("250") == 250.0 and deadline_header_ms(str(MAX_DEADLINE_MS)) == MAX_DEADLINE_MS


def test_questions_need_a_word():
    for bad in ("?!...", "   ", "---"):
        with pytest.raises(ValidationError, match="question"):
            SearchRequest.model_validate({"question": bad})
    assert SearchRequest.model_validate({"question": "1"}).question == "1"


def test_compact_records_read_back():
    hit = Hit("c", "d", "text", "title", "Treatment", 0.5, {"dense": 0.4}, {"topic": "x"}, "p", None)
    res = SearchResult("q", [hit], "factoid", False, [], False, [StageInfo("dense", True, "ef=64", 1.0)], {"total": 2})
    compact = res.to_dict(explain=False)
    assert compact["hits"][0]["scores"] == {} and "reason" not in compact["stages"][0]
    back = SearchResult.from_dict(compact)
    assert back.hits[0].scores == {} and back.stages[0].reason == "" and back.hits[0].text == "text"
    assert SearchResult.from_dict(res.to_dict()) == res
    ans = Answer("q", "t [1].", citations=[Citation("t [1].", [1], True, 1.0, "ok")], evidence=[hit])
    assert Answer.from_dict(ans.to_dict()) == ans
    assert Answer.from_dict(ans.to_dict(explain=False)).evidence[0].scores == {}


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=12) | st.text(st.characters(max_codepoint=0x3000), max_size=6))
@example("\u00f9\u0000\u00b5")  # the fuzzer's find: letters outside ASCII
@example("\u1680")  # Ogham's space mark: whitespace inside a script's block
@example("?!")
@example("\u4ec0\u4e48")
@example("_")
def test_the_question_rule_is_the_published_patterns_in_every_regex_dialect(text):
    """The server's word rule, Python's ``re`` and jsonschema_rs (ECMA-262 patterns, as schemathesis reads the
    OpenAPI document) accept the same questions: the published schema neither refuses what the server takes
    (``ù``: Python's ``\\w`` is Unicode, ECMA's ASCII) nor allows what it refuses."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    schema = SearchRequest.model_json_schema()["properties"]["question"]
    published = jsonschema_rs.validator_for(schema).is_valid(text)
    try:
        TypeAdapter(WordedQuestion).validate_python(text)
        served = True
    except ValidationError:
        served = False
    assert served == published == (bool(text.strip()) and re.search(WORD_PATTERN, text) is not None)
