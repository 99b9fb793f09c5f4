"""What the conformance tests share: the requests hypothesis draws (every declared option, valid and invalid values,
misspelt names, bad questions), the comparison of two doors' answers, and ``check_door``, which asks a door the
drawn requests and compares each answer with a reference door's."""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

from medretrieve.wire import MAX_DEADLINE_MS, MAX_K, SEARCH_OPTIONS, SECTIONS, STAGE_SWITCHES

from .doors import Request, same

EXAMPLES = 40  # drawn requests per door (each a search at both doors)

# deadlines long enough for no stage to be cut on a loaded machine (a cut search depends on timing, not on the
# door; absent: the default, 300 ms, where a cut is retried and then left out)
VALID_VALUES: Dict[str, Any] = {
    "k": st.integers(1, MAX_K), "deadline_ms": st.sampled_from([5_000, 60_000.0, MAX_DEADLINE_MS]),
    "per_document": st.integers(1, 4),
    "sections": st.lists(st.sampled_from(SECTIONS), min_size=1, max_size=3, unique=True),
    # the demo corpus's documents carry a topic (a keyword field): filters in both forms, passing many or few rows
    "where": st.sampled_from(["topic == cardiology", "not topic in (cardiology, endocrinology)",
                              {"field": "topic", "op": "in", "value": ["infectious disease", "neurology"]},
                              {"or": [{"field": "topic", "op": "==", "value": "cardiology"},
                                      {"not": {"field": "topic", "op": "!=", "value": "endocrinology"}}]}]),
    "include_retracted": st.booleans(), "evidence_prior": st.booleans(),
    "recency_half_life": st.sampled_from([0.5, 5, 20.0, 1000]),
    **{name: st.booleans() for name in STAGE_SWITCHES}}
INVALID_VALUES: Dict[str, Any] = {
    "k": st.sampled_from(["5", True, 0, MAX_K + 1, 2.5, float("inf")]),
    "deadline_ms": st.sampled_from(["300", True, 0, -5, MAX_DEADLINE_MS * 2, float("nan")]),
    "per_document": st.sampled_from(["2", False, 0, MAX_K + 1]),
    "sections": st.sampled_from(["treatment", [], ["kitchen"], ["treatment", 3]]),
    # unreadable, of the wrong type, or naming a field the collection lacks (refused when the search starts)
    "where": st.sampled_from(["topic ==", 5, ["topic"], "year >= 2015", {"field": "topic", "op": "~", "value": 1},
                              "topic > cardiology"]),
    "include_retracted": st.sampled_from([1, "true"]), "evidence_prior": st.sampled_from([1, "false"]),
    "recency_half_life": st.sampled_from([0, -1, "5", 1001, float("inf"), True]),
    **{name: st.sampled_from([1, 0, "false", "true"]) for name in STAGE_SWITCHES}}
_MISSPELT = st.sampled_from(["section", "recover", "lexical", "diversify", "top_k", "K", "deadline"])
_BAD_QUESTIONS = st.sampled_from([" ", "?!", "", 42, "x" * 4001])
assert set(VALID_VALUES) == set(INVALID_VALUES) == set(SEARCH_OPTIONS)  # every declared option is drawn


@st.composite
def requests(draw: Any, questions: Any) -> Request:
    """A request with at most one fault (a bad question, one bad value, or one misspelt name), so that every door
    has one thing to refuse and the refusals can be compared."""
    names = draw(st.lists(st.sampled_from(sorted(SEARCH_OPTIONS)), max_size=4, unique=True))
    options = {name: draw(VALID_VALUES[name]) for name in names}
    fault = draw(st.sampled_from(["none", "none", "question", "value", "name"]))
    if fault != "none" and options.get("dense") is False and options.get("bm25") is False:
        options["bm25"] = True  # both off is a fault of its own
    question = draw(_BAD_QUESTIONS) if fault == "question" else draw(st.sampled_from(questions))
    if fault == "value":
        name = draw(st.sampled_from(sorted(SEARCH_OPTIONS)))
        options[name] = draw(INVALID_VALUES[name])
    elif fault == "name":
        options[draw(_MISSPELT)] = draw(st.sampled_from([1, True, ["treatment"]]))
    return Request(question, options)


def compared(reference_door: Any, door: Any, request: Request, retries: int = 1) -> None:
    """Ask both doors; a search the deadline cut at either door is asked again (``retries`` times), then left out
    (hypothesis draws another)."""
    for _ in range(retries + 1):
        want, got = reference_door.search(request), door.search(request)
        if not (want.cut or got.cut):
            same(want, got, door.name)
            return
    reject()


def compared_or_fail(reference_door: Any, door: Any, request: Request) -> None:
    want, got = reference_door.search(request), door.search(request)
    if want.cut or got.cut:  # once more: a loaded machine cut a stage at one of them
        want, got = reference_door.search(request), door.search(request)
    same(want, got, door.name)


def check_door(reference_door: Any, door: Any, questions: List[str],
               sendable: Callable[[Request], bool] = lambda req: True,
               compare: Callable[[Any, Any, Request], None] = compared, examples: int = EXAMPLES,
               at_least: float = 0.5, fixtures_per_test: bool = False) -> None:
    """Ask ``door`` and ``reference_door`` the drawn requests (``examples`` of them) and compare each pair of
    answers (``compare``); a request the door's own caller cannot send (``sendable`` false, e.g. a NaN no JSON can
    write) is drawn again. At least ``at_least`` of the draws must have been compared."""
    checked = []
    health = [HealthCheck.too_slow, HealthCheck.filter_too_much]
    if fixtures_per_test:
        health.append(HealthCheck.function_scoped_fixture)

    @settings(max_examples=examples, deadline=None, derandomize=True, suppress_health_check=health)
    @given(requests(questions))
    def check(req: Request) -> None:
        note(repr(req))
        if not sendable(req):
            reject()
        compare(reference_door, door, req)
        checked.append(req)

    check()
    assert len(checked) >= examples * at_least
