"""Contract tests of the LLM backends against the scripted fake server (no real model)."""
from __future__ import annotations

import json
import time

import pytest
from llm_server import FakeLLMServer, Trickle, chat_reply, error_reply, refused_base_url, scripted

from medretrieve.generation.llm import (
    Backend,
    LLMBadResponse,
    LLMContextTooLong,
    LLMError,
    LLMTimeout,
    LLMUnavailable,
    OpenAIBackend,
    check_messages,
    normalize_response_format,
)

MSGS = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "Is aspirin an NSAID?"}]


def backend(srv, **kw):
    kw.setdefault("backoff_s", 0.01)
    return OpenAIBackend(srv.base_url, "fake-model", **kw)


def test_reply_text_and_request_shape(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MEDRETRIEVE_LLM_API_KEY", raising=False)
    with FakeLLMServer(scripted([(200, chat_reply("EXACT: yes"), 0.0)])) as srv:
        with backend(srv) as b:
            assert b.generate(MSGS, max_tokens=64, temperature=0.2) == "EXACT: yes"
            assert b.last_finish_reason == "stop"
            assert b.last_usage["total_tokens"] == 2
        req = srv.requests[0]
        assert req["path"] == "/v1/chat/completions"
        body = req["json"]
        assert body["model"] == "fake-model"
        assert body["messages"] == MSGS
        assert body["max_tokens"] == 64 and body["temperature"] == 0.2
        assert "response_format" not in body
        assert "Authorization" not in req["headers"]


def test_api_key_from_argument_and_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("MEDRETRIEVE_LLM_API_KEY", "env-key")
    with FakeLLMServer() as srv:
        backend(srv).generate(MSGS)
        backend(srv, api_key="arg-key").generate(MSGS)
        monkeypatch.delenv("MEDRETRIEVE_LLM_API_KEY")
        monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
        backend(srv).generate(MSGS)
    auth = [r["headers"].get("Authorization") for r in srv.requests]
    assert auth == ["Bearer env-key", "Bearer arg-key", "Bearer openai-key"]


@pytest.mark.parametrize(
    "given, expected",
    [
        ("http://h:1/v1", "http://h:1/v1"),
        ("http://h:1/v1/", "http://h:1/v1"),
        ("http://h:1", "http://h:1/v1"),
        ("http://h:1/v1/chat/completions", "http://h:1/v1"),
        ("https://api.example.org/openai/v1", "https://api.example.org/openai/v1"),
    ],
)
def test_base_url_normalisation(given, expected):
    b = OpenAIBackend(given, "m")
    assert b.base_url == expected and b.url == expected + "/chat/completions"


@pytest.mark.parametrize("bad", ["localhost:8000", "", "ftp://x/v1", None])
def test_bad_base_url(bad):
    with pytest.raises(ValueError, match="base_url"):
        OpenAIBackend(bad, "m")


def test_bad_arguments():
    with pytest.raises(ValueError, match="model"):
        OpenAIBackend("http://h:1/v1", " ")
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIBackend("http://h:1/v1", "m", max_retries=-1)
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIBackend("http://h:1/v1", "m", timeout_s=0)
    b = OpenAIBackend("http://h:1/v1", "m")
    with pytest.raises(ValueError, match="max_tokens"):
        b.generate(MSGS, max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        b.generate(MSGS, temperature=-1)
    with pytest.raises(ValueError, match="response_format"):
        b.generate(MSGS, response_format="yaml")


def test_check_messages_errors():
    with pytest.raises(TypeError):
        check_messages("hello")
    with pytest.raises(ValueError, match="empty"):
        check_messages([])
    with pytest.raises(ValueError, match="role"):
        check_messages([{"role": "robot", "content": "x"}])
    with pytest.raises(TypeError, match="content"):
        check_messages([{"role": "user", "content": None}])
    assert check_messages([{"role": "user", "content": "x", "name": "n"}]) == [{"role": "user", "content": "x"}]


def test_backend_protocol():
    assert isinstance(OpenAIBackend("http://h:1/v1", "m"), Backend)


@pytest.mark.parametrize(
    "status, body, err",
    [
        (200, "{not json", LLMBadResponse),
        (200, {"id": "x", "object": "chat.completion"}, LLMBadResponse),
        (200, {"choices": []}, LLMBadResponse),
        (200, {"choices": [{"message": {"role": "assistant", "content": None}}]}, LLMBadResponse),
        (400, error_reply("bad parameter 'foo'"), LLMBadResponse),
        (401, error_reply("Incorrect API key provided", code="invalid_api_key"), LLMUnavailable),
        (404, error_reply("The model `nope` does not exist", code="model_not_found"), LLMUnavailable),
    ],
)
def test_malformed_and_rejected_replies(status, body, err):
    with FakeLLMServer(scripted([(status, body, 0.0)])) as srv:
        with pytest.raises(err) as info:
            backend(srv).generate(MSGS)
    assert isinstance(info.value, LLMError)
    assert len(srv.requests) == 1  # not retried


def test_content_parts_are_joined():
    body = {"choices": [{"message": {"role": "assistant", "content": [
        {"type": "text", "text": "EXACT: "}, {"type": "text", "text": "no"}]}, "finish_reason": "stop"}]}
    with FakeLLMServer(scripted([(200, body, 0.0)])) as srv:
        assert backend(srv).generate(MSGS) == "EXACT: no"


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens.",
        "Requested tokens (3000) exceed context window of 2048",
        "prompt is too long",
        "request (4476 tokens) exceeds the available context size (4096 tokens)",
    ],
)
def test_context_too_long(message):
    with FakeLLMServer(scripted([(400, error_reply(message, code="context_length_exceeded"), 0.0)])) as srv:
        with pytest.raises(LLMContextTooLong, match="context window") as info:
            backend(srv).generate(MSGS, response_format="json")
    assert isinstance(info.value, LLMBadResponse)
    assert len(srv.requests) == 1  # neither retried nor re-sent without response_format


def test_slow_reply_past_deadline_raises_timeout_in_time():
    with FakeLLMServer(scripted([(200, chat_reply("late"), 5.0)])) as srv:
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout, match="deadline"):
            backend(srv, timeout_s=30).generate(MSGS, deadline_ms=300)
        assert time.monotonic() - t0 < 2.5


def test_expired_deadline_does_not_call():
    with FakeLLMServer() as srv:
        with pytest.raises(LLMTimeout):
            backend(srv).generate(MSGS, deadline_ms=0)
    assert srv.requests == []


def test_per_attempt_timeout_is_retried():
    with FakeLLMServer(scripted([(200, chat_reply("slow"), 3.0), (200, chat_reply("fast"), 0.0)])) as srv:
        assert backend(srv, timeout_s=0.3, max_retries=1).generate(MSGS) == "fast"
    assert len(srv.requests) == 2


def test_per_attempt_timeout_exhausted():
    with FakeLLMServer(scripted([(200, chat_reply("slow"), 3.0)])) as srv:
        with pytest.raises(LLMTimeout, match="timeout_s"):
            backend(srv, timeout_s=0.2, max_retries=1).generate(MSGS)
    assert len(srv.requests) == 2


def test_429_then_success_honours_retry_after():
    replies = [(429, error_reply("Rate limit reached", "rate_limit_error"), 0.0, {"Retry-After": "0.4"}),
               (200, chat_reply("EXACT: no"), 0.0)]
    with FakeLLMServer(scripted(replies)) as srv:
        t0 = time.monotonic()
        assert backend(srv, backoff_s=0.0).generate(MSGS) == "EXACT: no"
        assert time.monotonic() - t0 >= 0.4
    assert len(srv.requests) == 2


def test_retry_after_beyond_deadline_gives_up_early():
    replies = [(429, error_reply("Rate limit reached"), 0.0, {"Retry-After": "5"}), "never"]
    with FakeLLMServer(scripted(replies)) as srv:
        t0 = time.monotonic()
        with pytest.raises(LLMUnavailable, match="deadline"):
            backend(srv).generate(MSGS, deadline_ms=1000)
        assert time.monotonic() - t0 < 1.0
    assert len(srv.requests) == 1


def test_retry_after_too_long_without_deadline():
    replies = [(503, error_reply("overloaded"), 0.0, {"Retry-After": "3600"}), "never"]
    with FakeLLMServer(scripted(replies)) as srv:
        with pytest.raises(LLMUnavailable, match="retry after 3600"):
            backend(srv).generate(MSGS)


def test_5xx_then_success():
    replies = [(502, "<html>Bad Gateway</html>", 0.0), (503, error_reply("loading model"), 0.0), "EXACT: yes"]
    with FakeLLMServer(scripted(replies)) as srv:
        assert backend(srv, max_retries=2).generate(MSGS) == "EXACT: yes"
    assert len(srv.requests) == 3


def test_5xx_exhausts_retries():
    with FakeLLMServer(scripted([(500, error_reply("boom", "server_error"), 0.0)])) as srv:
        with pytest.raises(LLMUnavailable, match="HTTP 500 after 3 attempts: boom"):
            backend(srv, max_retries=2).generate(MSGS)
    assert len(srv.requests) == 3


def test_refused_connection():
    b = OpenAIBackend(refused_base_url(), "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(LLMUnavailable, match="cannot reach"):
        b.generate(MSGS)


def test_response_format_passed_through():
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    with FakeLLMServer() as srv:
        b = backend(srv)
        b.generate(MSGS, response_format="json")
        b.generate(MSGS, response_format=schema)
        b.generate(MSGS, response_format="text")
    sent = [r["json"].get("response_format") for r in srv.requests]
    assert sent == [{"type": "json_object"}, schema, None]


def test_response_format_rejected_falls_back_to_plain():
    def handler(req):
        if "response_format" in req:
            return 400, error_reply("'response_format' is not supported by this server"), 0.0
        return '{"answer_choice": "A"}'

    with FakeLLMServer(handler) as srv:
        b = backend(srv)
        assert b.generate(MSGS, response_format="json") == '{"answer_choice": "A"}'
        assert b.generate(MSGS, response_format="json") == '{"answer_choice": "A"}'
    sent = ["response_format" in r["json"] for r in srv.requests]
    assert sent == [True, False, False]  # the backend remembers the server cannot do it


def test_normalize_response_format():
    assert normalize_response_format(None) is None
    assert normalize_response_format("json") == {"type": "json_object"}
    with pytest.raises(ValueError):
        normalize_response_format({"schema": {}})


def test_server_records_non_chat_paths():
    import httpx

    with FakeLLMServer() as srv:
        assert httpx.get(srv.base_url + "/models").json()["data"][0]["id"] == "fake-model"
        assert httpx.post(srv.base_url + "/completions", json={}).status_code == 404


# ---------------------------------------------------------------------------
# TransformersBackend with a tiny randomly initialised GPT-2 (no download)

CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> assistant : {% endif %}"
)


def _save_tiny_model(folder, chat_template):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = "you answer is aspirin an nsaid yes no exact ideal the a of system user assistant : ?"
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([words], trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "<s>", "</s>"]))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(fast), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=2, eos_token_id=3, pad_token_id=1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=[True, False], ids=["chat_template", "plain_transcript"])
def tiny_model(request, tmp_path_factory):
    return _save_tiny_model(tmp_path_factory.mktemp("tiny_lm"), request.param)


def test_transformers_backend_generates(tiny_model):
    from medretrieve.generation.llm import TransformersBackend

    b = TransformersBackend(tiny_model)
    assert isinstance(b, Backend)
    assert b.max_context == 64
    out = b.generate(MSGS, max_tokens=8)
    assert isinstance(out, str)
    assert out == b.generate(MSGS, max_tokens=8)  # greedy decoding is deterministic
    words = set("you answer is aspirin an nsaid yes no exact ideal the a of system user assistant : ?".split())
    assert all(w in words or w.startswith("<") for w in out.split())  # decoded from the tiny vocab
    sampled = b.generate(MSGS, max_tokens=8, temperature=1.0)
    assert isinstance(sampled, str)


def test_transformers_backend_context_too_long(tiny_model):
    from medretrieve.generation.llm import TransformersBackend

    b = TransformersBackend(tiny_model)
    with pytest.raises(LLMContextTooLong, match="context window of 64"):
        b.generate(MSGS, max_tokens=60)
    long_msgs = [{"role": "user", "content": "aspirin " * 200}]
    with pytest.raises(LLMContextTooLong):
        b.generate(long_msgs, max_tokens=4)


def test_transformers_backend_deadline(tiny_model):
    from medretrieve.generation.llm import TransformersBackend

    b = TransformersBackend(tiny_model, max_context=100000)
    with pytest.raises(LLMTimeout):
        b.generate(MSGS, max_tokens=5, deadline_ms=0)
    # 1 ms cannot fit 5000 decoding steps: generation stops at the deadline.
    with pytest.raises(LLMTimeout, match="deadline"):
        b.generate(MSGS, max_tokens=5000, deadline_ms=1)


def test_transformers_backend_bad_folder(tmp_path):
    pytest.importorskip("transformers")
    from medretrieve.generation.llm import TransformersBackend

    with pytest.raises(FileNotFoundError):
        TransformersBackend(tmp_path / "missing")
    with pytest.raises(LLMUnavailable, match="cannot load"):
        TransformersBackend(tmp_path)


def test_transformers_backend_prompt_format(tiny_model):
    from medretrieve.generation.llm import TransformersBackend

    b = TransformersBackend(tiny_model, dtype="float32")
    prompt = b.tokenizer.decode(b._prompt_ids(MSGS)[0])
    if b.tokenizer.chat_template:  # the model's own chat format, ending in the generation prompt
        assert prompt.startswith("<s> system :") and prompt.endswith("<s> assistant :")
    else:  # plain "Role: content" transcript (unknown words decode to <unk> in the tiny vocab)
        assert prompt.count(":") == 3 and "aspirin an" in prompt
    with pytest.raises(ValueError, match="dtype"):
        TransformersBackend(tiny_model, dtype="floaty")


# --------------------------------------------------------------------------- hostile servers


def test_a_trickling_body_ends_by_the_timeout():
    """1 byte every 0.5 s: every read is quick, the whole reply never ends; the call must end at timeout_s."""
    body = json.dumps(chat_reply("slow")).encode()
    with FakeLLMServer(lambda req: (200, Trickle(body, 1, 0.5), 0.0)) as srv:
        backend = OpenAIBackend(srv.base_url, "m", timeout_s=2.0, max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout, match="within timeout_s=2.0 s"):
            backend.generate([{"role": "user", "content": "hi"}])
        assert time.monotonic() - t0 < 3.5
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout):
            OpenAIBackend(srv.base_url, "m", timeout_s=30.0, max_retries=0).generate(
                [{"role": "user", "content": "hi"}], deadline_ms=1500)
        assert time.monotonic() - t0 < 3.0


def test_a_reply_over_the_size_cap_is_refused():
    huge = json.dumps(chat_reply("x" * 5000)).encode()
    with FakeLLMServer(lambda req: (200, huge, 0.0, {"Content-Type": "application/json"})) as srv:
        with pytest.raises(LLMBadResponse, match="max_response_bytes=4096"):
            OpenAIBackend(srv.base_url, "m", max_retries=0, max_response_bytes=4096).generate(
                [{"role": "user", "content": "hi"}])
        assert OpenAIBackend(srv.base_url, "m", max_retries=0).generate([{"role": "user", "content": "hi"}])


def test_a_gzip_bomb_is_refused_without_expanding_it():
    import gzip

    bomb = gzip.compress(b"[" + b" " * (64 << 20) + b"]", 9)  # ~64 KiB on the wire, 64 MiB expanded
    assert len(bomb) < 1 << 20
    with FakeLLMServer(lambda req: (200, bomb, 0.0, {"Content-Encoding": "gzip"})) as srv:
        with pytest.raises(LLMBadResponse, match="max_response_bytes"):
            OpenAIBackend(srv.base_url, "m", max_retries=0, max_response_bytes=1 << 20).generate(
                [{"role": "user", "content": "hi"}])


def test_gzip_replies_are_read_and_bad_gzip_is_a_bad_response():
    import gzip

    good = gzip.compress(json.dumps(chat_reply("zipped")).encode())
    with FakeLLMServer(lambda req: (200, good, 0.0, {"Content-Encoding": "gzip"})) as srv:
        assert OpenAIBackend(srv.base_url, "m").generate([{"role": "user", "content": "hi"}]) == "zipped"
    with FakeLLMServer(lambda req: (200, b"not gzip at all", 0.0, {"Content-Encoding": "gzip"})) as srv:
        with pytest.raises(LLMBadResponse, match="not valid gzip"):
            OpenAIBackend(srv.base_url, "m", max_retries=0).generate([{"role": "user", "content": "hi"}])


def test_deeply_nested_json_is_a_bad_response_not_a_recursion_error():
    nested = b"[" * 200_000 + b"]" * 200_000
    with FakeLLMServer(lambda req: (200, nested, 0.0, {"Content-Type": "application/json"})) as srv:
        with pytest.raises(LLMBadResponse, match="nested too deeply"):
            OpenAIBackend(srv.base_url, "m", max_retries=0).generate([{"role": "user", "content": "hi"}])


def test_stream_yields_the_pieces_in_order():
    from llm_server import stream_reply

    replies = [(429, error_reply("busy"), 0.0, {"Retry-After": "0"}), stream_reply(["EXACT: ", "yes", ""])]
    with FakeLLMServer(scripted(replies)) as srv:
        with backend(srv) as b:
            assert list(b.stream(MSGS, max_tokens=8)) == ["EXACT: ", "yes"]
            assert b.last_finish_reason == "stop"
    assert srv.requests[-1]["json"]["stream"] is True and len(srv.requests) == 2  # the 429 was retried


@pytest.mark.parametrize("reply,err", [
    ((400, error_reply("maximum context length is 2048 tokens"), 0.0), LLMContextTooLong),
    ((200, b"data: {not json}\n\n", 0.0, {"Content-Type": "text/event-stream"}), LLMBadResponse),
    ((500, error_reply("down"), 0.0), LLMUnavailable),
])
def test_stream_errors_are_typed(reply, err):
    with FakeLLMServer(scripted([reply])) as srv:
        with pytest.raises(err):
            list(backend(srv, max_retries=0).stream(MSGS))


def test_a_cancelled_stream_closes_its_request_at_once():
    """Cancel from another thread while the backend waits for the next piece: it stops within a moment (not at the
    next piece, 2 s away) and the LLM server sees the connection close."""
    import threading

    from llm_server import stream_reply

    from medretrieve.generation.llm import Cancel, LLMCancelled

    status, payload, delay, headers = stream_reply(["first "] + ["later "] * 20)
    first_event = payload.index(b"\n\n") + 2
    reply = (status, Trickle(payload, chunk=first_event, interval_s=2.0), delay, headers)
    with FakeLLMServer(lambda req: reply) as srv, backend(srv) as b:
        cancel = Cancel()
        pieces = b.stream(MSGS, max_tokens=8, cancel=cancel)
        assert next(pieces) == "first "
        timer = threading.Timer(0.3, cancel.set)
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(LLMCancelled):
            next(pieces)
        assert time.monotonic() - t0 < 1.5
        give_up = time.monotonic() + 6
        while not srv.dropped_at and time.monotonic() < give_up:
            time.sleep(0.05)
        assert srv.dropped_at and srv.dropped_at[0] - t0 < 5  # the server's next writes found the connection gone
        with pytest.raises(LLMCancelled):  # cancelled before it starts: nothing is sent
            next(b.stream(MSGS, max_tokens=8, cancel=cancel))
        assert len(srv.requests) == 1
