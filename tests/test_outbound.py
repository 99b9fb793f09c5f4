"""medretrieve.outbound, the ground floor of every call to another server: the one deadline type, the one
Retry-After rule (a property test), the retry decision's order, backoff bounds and settings checks; and that the
package keeps one of each (no second Retry-After parser, no deadline clock that is not a Deadline)."""
from __future__ import annotations

import ast
import email.utils
import importlib
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import medretrieve
from medretrieve.outbound import Deadline, OutboundPolicy, Retry, RetryAfterError, parse_retry_after
from medretrieve.retrieval import budget

PACKAGE = Path(medretrieve.__file__).resolve().parent


def test_a_deadline_counts_down_and_checks_its_budget():
    d = Deadline(50)
    assert not d.unlimited and 0 < d.remaining_ms() <= 50 and 0 < d.remaining_s() <= 0.05
    assert 0 < d.monotonic_end() - time.monotonic() <= 0.05
    unlimited = Deadline(None)
    assert unlimited.remaining_s() == math.inf and not unlimited.expired() and unlimited.monotonic_end() is None
    assert Deadline(0).expired()
    for bad, error in (("300", TypeError), (True, TypeError), (-1, ValueError), (float("nan"), ValueError)):
        with pytest.raises(error, match="deadline budget"):
            Deadline(bad)
    assert budget.Deadline is Deadline  # the retrieval wing names the same type


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.floats().map(repr), st.integers(-10, 10**12).map(str),
                 st.floats(0, 1e6).map(lambda f: f"{f:.3f}"),
                 st.datetimes(timezones=st.just(__import__("datetime").timezone.utc)).map(
                     lambda d: email.utils.format_datetime(d, usegmt=True))))
def test_retry_after_is_a_finite_delay_or_refused(value):
    try:
        wait = parse_retry_after(value)
    except RetryAfterError as exc:
        assert "Retry-After" in str(exc)
        return
    assert wait is not None and math.isfinite(wait) and wait >= 0


def test_retry_after_reads_seconds_and_dates_and_refuses_the_rest():
    assert parse_retry_after(None) is None
    assert parse_retry_after(" 3 ") == 3.0 and parse_retry_after("0.25") == 0.25
    assert parse_retry_after("Tue, 01 Jan 2019 00:00:00 GMT") == 0.0  # a date already past
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after(future) <= 30
    for bad in ("nan", "inf", "-1", "1e3", "soon", "", "Tue, 01 Jan 2019 00:00:00"):  # the last: no zone
        with pytest.raises(RetryAfterError):
            parse_retry_after(bad)


def test_the_retry_decision_checks_the_servers_time_then_retries_then_the_deadline():
    policy = OutboundPolicy(max_retries=1, backoff_s=0.1, max_retry_after_s=10)
    assert policy.retry(0, Deadline(None)) == Retry(0.1)
    assert policy.retry(0, Deadline(None), "2") == Retry(2.0, "", 2.0)
    assert policy.retry(1, Deadline(None), "3600") == Retry(None, "retry_after", 3600.0)
    assert policy.retry(1, Deadline(None), "2") == Retry(None, "retries", 2.0)
    assert policy.retry(0, Deadline(1000), "2") == Retry(None, "deadline", 2.0)
    with pytest.raises(RetryAfterError):
        policy.retry(0, Deadline(None), "nan")


def test_backoff_doubles_up_to_its_cap_with_bounded_jitter():
    plain = OutboundPolicy(backoff_s=0.5, max_backoff_s=8.0)
    assert [plain.backoff(a) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    jittered = OutboundPolicy(backoff_s=1.0, max_backoff_s=2.0, jitter=True)
    assert all(0.5 <= jittered.backoff(0) <= 1.5 and 1.0 <= jittered.backoff(5) <= 3.0 for _ in range(50))


def test_an_attempt_gets_the_timeout_or_what_the_deadline_leaves():
    policy = OutboundPolicy(timeout_s=5.0)
    assert policy.attempt_s(Deadline(None)) == 5.0 and 0 < policy.attempt_s(Deadline(200)) <= 0.2


@pytest.mark.parametrize("bad", [{"timeout_s": 0}, {"timeout_s": float("nan")}, {"max_retries": -1},
                                 {"max_retries": 1.5}, {"max_retry_after_s": -1}, {"max_reply_bytes": 0},
                                 {"backoff_s": True}])
def test_bad_policy_settings_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        OutboundPolicy(**bad)


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")


def test_the_package_parses_retry_after_in_one_place():
    """An HTTP date or a Retry-After header read anywhere but medretrieve.outbound is a second rule."""
    readers = sorted(str(path.relative_to(PACKAGE)) for path, text in _sources()
                     if "parsedate" in text and path.name != "outbound.py")
    assert not readers, f"these parse HTTP dates (Retry-After) themselves: {readers}"


def test_every_deadline_clock_is_the_one_deadline_type():
    """A class named like a clock or a deadline is medretrieve.outbound.Deadline or builds on it."""
    found = []
    for path, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name.lstrip("_").endswith(("Clock", "Deadline")):
                module = ".".join(("medretrieve", *path.relative_to(PACKAGE).with_suffix("").parts))
                found.append(getattr(importlib.import_module(module), node.name))
    assert Deadline in found
    others = [cls for cls in found if not issubclass(cls, Deadline)]
    assert not others, f"deadline clocks that are not medretrieve.outbound.Deadline: {others}"
