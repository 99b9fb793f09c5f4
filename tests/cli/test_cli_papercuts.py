"""A new user's first commands: what is missing is said in CLI terms, `build` needs no `--encoder` for the
embedded model, and a library message never asks a command line for ``name=`` (issue 44, finding 8)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.cli import main
from medretrieve.cli.errors import cli_syntax


def test_search_with_a_collection_but_no_question_asks_for_the_question(tmp_path: Path, capsys) -> None:
    assert main(["search", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"missing the QUESTION after the collection: medretrieve search {tmp_path} 'QUESTION'" in err
    assert "give a COLLECTION" not in err


def test_search_with_a_question_but_no_collection_asks_for_the_collection(capsys) -> None:
    assert main(["search", "What causes gout?"]) == 2
    err = capsys.readouterr().err
    assert "missing the COLLECTION before the question: medretrieve search COLLECTION 'What causes gout?'" in err
    assert "--pubmed --encoder default" in err


def test_build_uses_the_embedded_model_without_encoder(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "Gout", "text": "Allopurinol lowers serum urate."}) + "\n")
    assert main(["build", str(corpus), str(tmp_path / "col"), "--quiet"]) == 0
    assert "built" in capsys.readouterr().out
    from medretrieve.models.encoders import embedded_model_dir

    encoder = json.loads((tmp_path / "col" / "manifest.json").read_text())["encoder"]
    assert Path(encoder["source"]) == embedded_model_dir("default")


def test_a_format_it_cannot_tell_asks_for_the_format_option(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("plain notes, no records\n")
    assert main(["build", str(notes), str(tmp_path / "col"), "--quiet", "--errors", "raise"]) == 2
    err = capsys.readouterr().err
    assert "cannot tell the format of" in err and "give --format NAME, NAME one of jsonl" in err
    assert "format=" not in err


def test_an_existing_output_asks_for_the_overwrite_option(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "text": "Colchicine eases gout flares."}) + "\n")
    assert main(["build", str(corpus), str(tmp_path / "col"), "--quiet"]) == 0
    assert main(["build", str(corpus), str(tmp_path / "col"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "exists; give --overwrite to replace it" in err and "overwrite=True" not in err


@pytest.mark.parametrize("library,cli", [
    ("x; pass format=NAME (CLI: --format NAME), NAME one of a, b", "x; give --format NAME, NAME one of a, b"),
    ("out exists; pass overwrite=True (CLI: --overwrite) to replace it", "out exists; give --overwrite to replace it"),
    ("dir exists and is not empty; pass overwrite=True (--overwrite)", "dir exists and is not empty; give --overwrite"),
    ("k must be positive (k=0)", "k must be positive (k=0)"),  # a value shown, not an argument asked for
])
def test_library_wording_of_an_argument_becomes_the_option(library: str, cli: str) -> None:
    assert cli_syntax(library) == cli
