"""``medretrieve mcp`` refuses what it cannot serve before any transport starts (exit 2, one line, no traceback);
tests/integrations/test_mcp_server.py runs it for real."""
from __future__ import annotations

import sys

import pytest

from medretrieve.cli import main


@pytest.mark.parametrize("args,message", [
    (["{tmp}/nothing"], "is not a medretrieve collection"),
    (["{col}", "--llm", "http://127.0.0.1:1/v1"], "--llm and --model go together"),
    (["http://127.0.0.1:1", "--llm", "http://127.0.0.1:1/v1", "--model", "m"],
     "answers with the LLM it was started with"),
])
def test_mcp_refuses_bad_settings(tmp_path, capsys, medretrieve_collection, args, message):
    pytest.importorskip("mcp")
    argv = [a.format(tmp=tmp_path, col=medretrieve_collection.directory) for a in args]
    assert main(["mcp", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medretrieve mcp: ") and message in err and "Traceback" not in err


def test_mcp_checks_k_when_parsing(capsys):
    with pytest.raises(SystemExit) as info:
        main(["mcp", "col", "--k", "0"])
    assert info.value.code == 2 and "--k: must be in [1, 100]" in capsys.readouterr().err


def test_mcp_checks_answer_concurrency_when_parsing(capsys):
    with pytest.raises(SystemExit) as info:
        main(["mcp", "col", "--answer-concurrency", "0"])
    assert info.value.code == 2 and "--answer-concurrency: must be >= 1" in capsys.readouterr().err


def test_mcp_passes_its_answer_settings_to_the_engine(monkeypatch, medretrieve_collection):
    """--answer-concurrency and --answer-deadline-ms reach the engine (the answers' bound; over a URL, the
    client's wait: it waited its default 10 s whatever --answer-deadline-ms said)."""
    pytest.importorskip("mcp")
    from medretrieve.integrations import mcp_server

    made = {}

    class Recorded(mcp_server.Engine):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made["engine"] = self

    monkeypatch.setattr(mcp_server, "Engine", Recorded)
    monkeypatch.setattr(mcp_server.MCPServer, "run", lambda self, transport="stdio", **kw: None)
    assert main(["mcp", "http://127.0.0.1:1", "--answer-concurrency", "3", "--answer-deadline-ms", "45000"]) == 0
    engine = made["engine"]
    assert engine.answer_slots.limit == 3 and engine.answer_deadline_ms == 45000
    assert engine.searcher.target.timeout_s == pytest.approx(46.0)  # the answer deadline and the client's grace


def test_mcp_without_the_mcp_extra_names_it(monkeypatch, capsys, tmp_path):
    monkeypatch.delitem(sys.modules, "medretrieve.integrations.mcp_server", raising=False)
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] + ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    assert main(["mcp", str(tmp_path)]) == 2
    assert 'pip install "medretrieve[mcp]"' in capsys.readouterr().err
