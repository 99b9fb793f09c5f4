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
from medretrieve.wire import (DEFAULT_DEADLINE_MS, DEFAULT_K, MAX_DEADLINE_MS, MAX_K, SEARCH_OPTIONS, SECTIONS,
                             STAGE_SWITCHES, WORD_PATTERN, BatchSearchRequest, SearchOptionTypeError,
                             SearchOptionValueError, SearchRequest, WordedQuestion, check_search_options,
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


# ------------------------------------------------------------------ the search request, declared once (issue 42)

def test_retriever_search_takes_exactly_the_declared_options():
    """``Retriever.search``'s keyword arguments are the declaration's options, each not given by default (None: the
    retriever's setting), but ``k`` and ``deadline_ms``, whose defaults are the declaration's constants."""
    import inspect

    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.server.config import ServerConfig

    params = dict(inspect.signature(Retriever.search).parameters)
    assert list(params)[:2] == ["self", "question"]
    assert set(params) - {"self", "question"} == set(SEARCH_OPTIONS)
    defaults = {name: p.default for name, p in params.items() if name in SEARCH_OPTIONS}
    assert defaults.pop("k") == SEARCH_OPTIONS["k"].default == DEFAULT_K
    assert defaults.pop("deadline_ms") == DEFAULT_DEADLINE_MS == ServerConfig.deadline_ms
    assert set(defaults.values()) == {None}
    assert [name for name, o in SEARCH_OPTIONS.items() if o.stage] == list(STAGE_SWITCHES)


def test_the_listing_reads_the_models():
    k, deadline, sections = SEARCH_OPTIONS["k"], SEARCH_OPTIONS["deadline_ms"], SEARCH_OPTIONS["sections"]
    assert (k.type, k.minimum, k.maximum, k.unit) == ("integer", 1, MAX_K, "hits")
    assert (deadline.type, deadline.exclusive_minimum, deadline.maximum, deadline.unit) == \
        ("number", 0, MAX_DEADLINE_MS, "ms")
    assert sections.items == SECTIONS and sections.min_items == 1
    assert all(o.type == "boolean" and o.default is None for o in SEARCH_OPTIONS.values() if o.stage)
    assert SEARCH_OPTIONS["k"].json_schema()["maximum"] == MAX_K


def _keywords(schema):
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            if key not in ("properties", "$defs", "default", "example", "examples", "const"):
                yield from _keywords(value)
            elif key in ("properties", "$defs"):
                for sub in value.values():
                    yield from _keywords(sub)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keywords(item)


def test_published_schemas_use_standard_json_schema_keywords():
    """Bounds are ``minimum`` / ``maximum`` / ``exclusiveMinimum`` (not pydantic's ``ge`` / ``le``), so agents and
    generators see them."""
    standard = {"type", "properties", "required", "additionalProperties", "items", "anyOf", "not", "const", "enum",
                "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "minItems", "maxItems",
                "pattern", "default", "examples", "description", "title", "$ref", "$defs", "x-unit"}
    for model in (SearchRequest, BatchSearchRequest):
        assert set(_keywords(model.model_json_schema())) <= standard
    for option in SEARCH_OPTIONS.values():
        assert set(_keywords(option.json_schema())) <= standard


def test_a_bare_request_passes_no_option_so_the_retriever_settings_hold():
    assert SearchRequest.model_validate({"question": "q"}).search_kwargs() == {}
    body = {"question": "q", "k": 5, "per_document": None, "stages": {"bm25": False, "mmr": None}}
    assert SearchRequest.model_validate(body).search_kwargs() == {"k": 5, "bm25": False}
    with pytest.raises(ValidationError, match="stages.recover"):  # one name per stage: the stage log's
        SearchRequest.model_validate({"question": "q", "stages": {"recover": False}})


_ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-5, 700_000), st.floats(allow_nan=True),
                       st.sampled_from(["5", "300", "", "true"]), st.lists(st.sampled_from(SECTIONS + ("kitchen",)),
                                                                           max_size=3))
_NAMES = st.sampled_from(sorted(SEARCH_OPTIONS) + ["recover", "lexical", "section", "K"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_NAMES, _ANY_VALUE, max_size=4))
def test_the_python_check_refuses_what_the_server_refuses(options):
    """``check_search_options`` (Python doors) and the request models (HTTP) accept the same options, and refuse the
    same ones naming the same option: a wrong type or an unknown name is a TypeError, a bad value a ValueError."""
    body: dict = {"question": "q", "stages": {}}
    for name, value in options.items():
        (body["stages"] if name in STAGE_SWITCHES else body)[name] = value
    try:
        SearchRequest.model_validate(body)
        server = None
    except ValidationError as exc:
        server = {str(e["loc"][1] if e["loc"][0] == "stages" and len(e["loc"]) > 1 else e["loc"][0])
                  for e in exc.errors()}
    try:
        check_search_options(options)
        python = None
    except (SearchOptionTypeError, SearchOptionValueError) as exc:
        python = exc.option
    assert (server is None) == (python is None), (server, python)
    if python is not None:
        assert python in server
