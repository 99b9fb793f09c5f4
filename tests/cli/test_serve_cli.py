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


def test_keys_tls_and_cors_reach_uvicorn_and_the_workers(tmp_path, capsys, medretrieve_collection, monkeypatch):
    """What ``serve`` hands uvicorn (run replaced: nothing listens): the certificate files, and the worker config
    with the keys' digests (never a key) and the CORS origins; keys over plain HTTP beyond loopback are warned of."""
    uvicorn = pytest.importorskip("uvicorn")
    from medretrieve.server.config import CONFIG_ENV, ServerConfig
    from medretrieve.server.keys import hash_key

    seen = {}

    def run(app, **settings):
        import os

        seen.update(settings, config=ServerConfig.from_json(os.environ[CONFIG_ENV]))

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    keys = tmp_path / "keys.txt"
    keys.write_text("a-key-of-twenty-chars search,admin\n")
    (tmp_path / "c.pem").write_text("cert")
    (tmp_path / "k.pem").write_text("key")
    col = str(medretrieve_collection.directory)
    assert main(["serve", col, "--api-key-file", str(keys), "--ssl-certfile", str(tmp_path / "c.pem"),
                 "--ssl-keyfile", str(tmp_path / "k.pem"), "--cors-origin", "https://a.example",
                 "--cors-origin", "https://b.example"]) == 0
    assert seen["ssl_certfile"] == str(tmp_path / "c.pem") and seen["ssl_keyfile"] == str(tmp_path / "k.pem")
    config = seen["config"]
    assert config.api_keys == ((hash_key("a-key-of-twenty-chars"), ("search", "admin")),)
    assert config.cors_origins == ("https://a.example", "https://b.example")
    assert "a-key-of-twenty-chars" not in config.to_json()
    assert "warning" not in capsys.readouterr().err
    seen.clear()
    assert main(["serve", col, "--api-key-file", str(keys), "--host", "0.0.0.0"]) == 0
    assert "ssl_certfile" not in seen and "API keys over plain HTTP" in capsys.readouterr().err
    assert main(["serve", col, "--host", "0.0.0.0", "--insecure"]) == 0  # the operator said so
    assert seen["config"].api_keys == () and "warning" not in capsys.readouterr().err
