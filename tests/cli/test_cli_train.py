"""``medretrieve fit-ranker`` says how many training questions match the collection, and warns or fails."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ROOT / "examples" / "demo_questions.json"


@pytest.fixture
def demo(demo_collection_dir):
    return demo_collection_dir


def test_fit_ranker_reports_the_matching_questions(demo, tmp_path, capsys):
    out = tmp_path / "ranker.json"
    assert main(["fit-ranker", str(demo), str(QUESTIONS), "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "42 of 42 training questions have a relevant document" in printed.out
    assert "warning" not in printed.err and out.is_file()


def test_fit_ranker_warns_or_fails_when_few_questions_match(demo, tmp_path, capsys):
    questions = json.loads(QUESTIONS.read_text())["questions"][:5]
    others = [{"id": f"x{i}", "type": "factoid", "body": f"Which gene causes disorder {i}?",
               "documents": [f"http://www.ncbi.nlm.nih.gov/pubmed/{900 + i}"]} for i in range(10)]
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"questions": questions + others}))
    out = tmp_path / "ranker.json"
    assert main(["fit-ranker", str(demo), str(mixed), "-o", str(out), "--strict"]) == 2
    assert "5 of 15 training questions" in capsys.readouterr().err and not out.exists()
    assert main(["fit-ranker", str(demo), str(mixed), "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "warning: only 5 of 15" in printed.err and out.is_file()
