"""``medretrieve serve`` refuses what it cannot serve before any worker starts (exit 2, one line, no traceback)."""
from __future__ import annotations

import pytest

from medretrieve.cli import main


@pytest.mark.parametrize("args,message", [
    (["{tmp}/nothing"], "is not a medretrieve collection"),
    (["{col}", "--ranker", "{tmp}/missing.json"], "ranker"),
    (["{col}", "--llm", "http://127.0.0.1:1/v1"], "llm_url and llm_model go together"),
    (["{col}", "--deadline-ms", "0"], "deadline_ms must be a finite number > 0"),
    # who may call: beyond loopback only with a key or --insecure; TLS needs both files; keys are checked
    (["{col}", "--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without an API key"),
    (["{col}", "--host", "::"], "refusing to listen on :: without an API key"),
    (["{col}", "--host", "server.example.org"], "--insecure"),
    (["{col}", "--host", "0.0.0.0", "--insecure", "--ssl-certfile", "{tmp}/c.pem"], "go together"),
    (["{col}", "--host", "0.0.0.0", "--api-key-file", "{keys}", "--ssl-keyfile", "{tmp}/k.pem"], "go together"),
    (["{col}", "--ssl-certfile", "{tmp}/c.pem", "--ssl-keyfile", "{tmp}/k.pem"], "--ssl-certfile {tmp}/c.pem: no such"),
    (["{col}", "--api-key-file", "{tmp}/missing.txt"], "no such file"),
    (["{col}", "--api-key-file", "{bad_keys}"], "entry 1: scopes must be a comma-separated list"),
])
def test_serve_refuses_bad_settings(tmp_path, capsys, medretrieve_collection, args, message):
    pytest.importorskip("uvicorn")
    (tmp_path / "keys.txt").write_text("a-key-of-twenty-chars search\n")
    (tmp_path / "bad_keys.txt").write_text("a-key-of-twenty-chars search,root\n")
    names = dict(tmp=tmp_path, col=medretrieve_collection.directory, keys=tmp_path / "keys.txt",
                 bad_keys=tmp_path / "bad_keys.txt")
    argv = [a.format(**names) for a in args]
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medretrieve serve: ") and message.format(**names) in err and "Traceback" not in err
    assert "a-key-of-twenty-chars" not in err  # a key is never echoed


def test_keys_in_the_environment_allow_listening_beyond_loopback(tmp_path, capsys, medretrieve_collection,
                                                                 monkeypatch):
    pytest.importorskip("uvicorn")
    monkeypatch.setenv("MEDRETRIEVE_API_KEYS", "a-key-of-twenty-chars search")
    # the exposure check passes; the TLS check after it refuses, so no server starts
    assert main(["serve", str(medretrieve_collection.directory), "--host", "0.0.0.0", "--ssl-certfile", "x"]) == 2
    assert "go together" in capsys.readouterr().err
    monkeypatch.setenv("MEDRETRIEVE_API_KEYS", "a-key-of-twenty-chars search")
    (tmp_path / "same.txt").write_text("a-key-of-twenty-chars answer\n")
    assert main(["serve", str(medretrieve_collection.directory), "--api-key-file", str(tmp_path / "same.txt")]) == 2
    assert "list it once" in capsys.readouterr().err


def test_serve_rejects_zero_workers(capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "col", "--workers", "0"])
    assert info.value.code == 2 and "--workers" in capsys.readouterr().err


def test_serve_without_the_serve_extra_names_it(monkeypatch, capsys, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert main(["serve", str(tmp_path)]) == 2
    assert 'pip install "medretrieve[serve]"' in capsys.readouterr().err
