"""``medretrieve serve`` refuses what it cannot serve before any worker starts (exit 2, one line, no traceback)."""
from __future__ import annotations

import pytest

from medretrieve.cli import main


@pytest.mark.parametrize("args,message", [
    (["{tmp}/nothing"], "is not a medretrieve collection"),
    (["{col}", "--ranker", "{tmp}/missing.json"], "ranker"),
    (["{col}", "--llm", "http://127.0.0.1:1/v1"], "llm_url and llm_model go together"),
    (["{col}", "--deadline-ms", "0"], "deadline_ms must be a finite number > 0"),
])
def test_serve_refuses_bad_settings(tmp_path, capsys, medretrieve_collection, args, message):
    pytest.importorskip("uvicorn")
    argv = [a.format(tmp=tmp_path, col=medretrieve_collection.directory) for a in args]
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medretrieve serve: ") and message in err and "Traceback" not in err


def test_serve_rejects_zero_workers(capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "col", "--workers", "0"])
    assert info.value.code == 2 and "--workers" in capsys.readouterr().err


def test_serve_without_the_serve_extra_names_it(monkeypatch, capsys, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert main(["serve", str(tmp_path)]) == 2
    assert 'pip install "medretrieve[serve]"' in capsys.readouterr().err
