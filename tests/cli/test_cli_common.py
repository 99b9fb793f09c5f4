"""What every command shares: the deadline option (None = no deadline everywhere), and one place that turns
library errors into messages and exit codes."""
from __future__ import annotations

import argparse

import pytest

from medretrieve.cli import main
from medretrieve.cli.errors import missing_extra_message, run_command
from medretrieve.cli.options import deadline


def test_deadline_option_none_means_no_deadline_and_zero_means_expired():
    assert deadline("none") is None and deadline("None") is None
    assert deadline("0") == 0.0 and deadline("250.5") == 250.5
    for bad in ("-1", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            deadline(bad)
    with pytest.raises(ValueError):
        deadline("soon")


def test_retriever_search_fn_passes_the_deadline_through():
    from medretrieve.evaluation.evaluate import retriever_search_fn

    seen = []

    class Fake:
        def search(self, q, k, **kw):
            seen.append(kw)

            class R:
                hits = []
            return R()

    retriever_search_fn(Fake(), deadline_ms=None)("q", 3)
    retriever_search_fn(Fake(), deadline_ms=0)("q", 3)
    retriever_search_fn(Fake())("q", 3)
    assert seen == [{"deadline_ms": None}, {"deadline_ms": 0}, {}]


@pytest.mark.parametrize("exc,code,text", [
    (ValueError("k must be positive"), 2, "medretrieve x: k must be positive"),
    (FileNotFoundError("no such collection"), 2, "no such collection"),
    (RuntimeError("corrupt index file"), 2, "RuntimeError: corrupt index file"),
    (KeyboardInterrupt(), 130, "interrupted"),
])
def test_library_errors_become_a_message_and_an_exit_code(exc, code, text, capsys):
    def handler(args):
        raise exc

    assert run_command("x", handler, argparse.Namespace()) == code
    assert text in capsys.readouterr().err


def test_a_bug_keeps_its_traceback():
    def handler(args):
        raise KeyError("internal")

    with pytest.raises(KeyError):
        run_command("x", handler, argparse.Namespace())


def test_a_missing_extra_is_named():
    assert 'pip install "medretrieve[export]"' in missing_extra_message(ModuleNotFoundError("x", name="torch"))
    assert 'medretrieve[llm]' in missing_extra_message(ModuleNotFoundError("x", name="httpx"))
    assert "optional dependency" in missing_extra_message(ModuleNotFoundError("No module named 'zzz'", name="zzz"))


def test_top_level_help_lists_every_command_without_markup(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in ("build", "search", "fit-ranker", "answer", "eval", "demo", "export-onnx"):
        assert command in out
    assert "``" not in out and ":func:" not in out


def _parsers():
    """(name, parser) of every command and sub-command."""
    import argparse as ap

    from medretrieve.cli import _COMMANDS, build_parser

    for name in _COMMANDS:
        top = build_parser(name)
        command = next(a for a in top._actions if isinstance(a, ap._SubParsersAction)).choices[name]
        yield name, command
        for action in command._actions:
            if isinstance(action, ap._SubParsersAction):
                yield from ((f"{name} {sub}", p) for sub, p in action.choices.items())


def test_every_option_says_what_it_is_and_its_default():
    from medretrieve.cli.options import HelpFormatter

    missing = []
    for name, parser in _parsers():
        assert parser.formatter_class is HelpFormatter, name
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.dest == "help" or isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help:
                missing.append(f"{name} {action.option_strings or action.dest}: no help")
            elif (action.option_strings and action.default not in (None, False)
                  and "default" not in formatter._get_help_string(action)):
                missing.append(f"{name} {action.option_strings}: default not shown")
    assert not missing, missing
