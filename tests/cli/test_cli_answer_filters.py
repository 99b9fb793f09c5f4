"""``medretrieve answer --where / --include-retracted / --evidence-prior / --recency-half-life`` (issue 45): the
flags are ``medretrieve search``'s own (built from the search declaration), every evidence hit passes the filter,
a bad one is a usage error (exit 2) naming it, and the sources listed show their year and publication types."""
from __future__ import annotations

import argparse
import json

import pytest
from medline_collection import QUESTION, build_medline_collection

from medretrieve.cli import build_parser, main
from medretrieve.wire import FILTER_OPTIONS



@pytest.fixture(scope="module")
def medline_dir(tmp_path_factory):
    out = build_medline_collection(tmp_path_factory)
    return str(out)


def _flags(command):
    """The command's filter flags: their spellings, help and arity."""
    parser = build_parser(command)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: (a.option_strings, a.help, a.nargs) for a in commands.choices[command]._actions
            if a.dest in FILTER_OPTIONS}


def test_the_flags_are_the_search_commands(medline_dir):
    answer, search = _flags("answer"), _flags("search")
    assert set(answer) == set(FILTER_OPTIONS) and answer == {name: search[name] for name in FILTER_OPTIONS}


def test_the_evidence_keeps_to_the_filter(medline_dir, capsys):
    assert main(["answer", medline_dir, QUESTION, "--k", "10", "--where", "year >= 2021", "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    assert ans["evidence"] and all(h["metadata"]["year"] >= 2021 for h in ans["evidence"]) and ans["citations"]
    assert main(["answer", medline_dir, QUESTION, "--k", "10", "--include-retracted", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert any(h["metadata"]["retracted"] for h in every["evidence"])
    assert any(h["metadata"].get("year", 0) < 2021 for h in every["evidence"])
    assert main(["answer", medline_dir, QUESTION, "--k", "10", "--include-retracted", "--evidence-prior",
                 "--recency-half-life", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evidence"][0]["metadata"]["publication_type"] == ["Practice Guideline"]


def test_the_sources_show_their_year_and_type(medline_dir, capsys):
    assert main(["answer", medline_dir, QUESTION, "--where", "year >= 2021"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  [")]
    assert listed and all("[2022; Practice Guideline]" in line for line in listed)


def _exit_code(argv):
    """The command's exit code: returned (an error the library raised) or a usage error's SystemExit."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("flags, says", [
    (["--where", "yeer >= 2015"], "unknown field 'yeer'"), (["--where", "year >"], "ends too early"),
    (["--recency-half-life", "0"], "recency_half_life"), (["--recency-half-life", "soon"], "recency_half_life"),
    (["--where", "journal > 3"], "journal"),
])
def test_a_bad_filter_is_a_usage_error_naming_it(medline_dir, capsys, flags, says):
    assert _exit_code(["answer", medline_dir, QUESTION, *flags]) == 2
    assert says in capsys.readouterr().err
