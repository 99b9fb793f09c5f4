"""The clients' HTTP/1.1 without I/O (medretrieve.client.http11): the request bytes, and replies read from bytes cut
anywhere (a property test), chunked or delimited by the connection's end, refused when malformed or too large."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medretrieve.client import http11
from medretrieve.client.http11 import LineSplitter, ReplyError, ReplyReader, RequestHead

BODY = b'{"question": "q", "hits": []}'
FIXED = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nServer-Timing: work;dur=2.5\r\nX-A: 1\r\nx-a: 2\r\n"
         b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
    b"%x\r\n%s\r\n" % (len(part), part) for part in (BODY[:7], BODY[7:])) + b"0\r\n\r\n")


def _read(pieces):
    reader = ReplyReader()
    for piece in pieces:
        reader.feed(piece)
    return reader


@settings(max_examples=200, deadline=None)
@given(wire=st.sampled_from([FIXED, CHUNKED]), cuts=st.lists(st.integers(0, len(CHUNKED)), max_size=12))
def test_a_reply_cut_anywhere_reads_the_same(wire, cuts):
    bounds = [0, *sorted(c for c in cuts if c <= len(wire)), len(wire)]
    reader = _read(wire[a:b] for a, b in zip(bounds, bounds[1:]))
    assert reader.done and reader.reusable and reader.status == 200
    assert reader.take() == BODY


def test_headers_by_any_case_and_repeated_ones_joined():
    reader = _read([FIXED])
    assert reader.headers.get("server-timing") == reader.headers.get("Server-Timing") == "work;dur=2.5"
    assert reader.headers.get("X-A") == "1, 2" and reader.headers.get("missing", "none") == "none"


def test_when_a_connection_can_carry_the_next_request():
    closing = _read([FIXED.replace(b"X-A: 1", b"Connection: close")])
    assert closing.done and not closing.reusable
    trailing = _read([FIXED + b"HTTP/1.1 200 OK\r\n"])  # bytes after the reply: no pipelining here
    assert trailing.done and not trailing.reusable
    until_close = _read([b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: a\n"])
    assert until_close.head_done and not until_close.done
    until_close.feed_eof()
    assert until_close.done and not until_close.reusable and until_close.take() == b"event: a\n"


def test_a_reply_cut_short_malformed_or_switching_protocols_is_a_reply_error():
    cut = _read([FIXED[:-3]])
    with pytest.raises(ReplyError, match="closed the connection in the middle"):
        cut.feed_eof()
    with pytest.raises(ReplyError, match="not HTTP/1.1"):
        _read([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"])
    with pytest.raises(ReplyError, match="switched protocols"):
        _read([b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"])


def test_a_body_over_the_limit_is_refused_as_announced_or_as_it_grows(monkeypatch):
    monkeypatch.setattr(http11, "MAX_REPLY_BYTES", 10)
    with pytest.raises(ReplyError, match=r"is 29 bytes, over the client's limit of 10"):
        _read([FIXED])
    with pytest.raises(ReplyError, match="over the client's limit of 10 bytes"):
        _read([CHUNKED])


def test_the_request_leaves_whole_and_refuses_header_injection():
    head = RequestHead("http://[::1]:8123/api/", {"Authorization": "Bearer t"})
    assert head.request("POST", "/v1/search", b"{}") == (
        b"POST /api/v1/search HTTP/1.1\r\nHost: [::1]:8123\r\nAuthorization: Bearer t\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    assert RequestHead("http://example.org").request("GET", "/healthz", None) == (
        b"GET /healthz HTTP/1.1\r\nHost: example.org\r\n\r\n")
    for headers in ({"X-A": "1\r\nX-Injected: 1"}, {"Bad Name": "1"}, {"X-A": "a\0b"}):
        with pytest.raises(ValueError, match="invalid header"):
            RequestHead("http://127.0.0.1:1", headers)
    with pytest.raises(ValueError, match="plain http://"):
        RequestHead("ftp://127.0.0.1")


def test_lines_split_across_pieces():
    lines = LineSplitter()
    assert lines.feed(b"event: a\r\nda") == ["event: a"]
    assert lines.feed(b"ta: 1\n\nlast") == ["data: 1", ""]
    assert lines.end() == ["last"] and lines.end() == []


def test_a_head_is_read_up_to_its_byte_and_header_limits_and_no_further():
    one_more = http11.MAX_HEAD_BYTES - len(FIXED) + len(BODY) + 1  # the filler that puts the head one byte over
    at_limit = FIXED.replace(b"X-A: 1", b"X-A: 1" + b"1" * (one_more - 1))
    assert _read([at_limit]).take() == BODY  # a head of exactly MAX_HEAD_BYTES, fed with its body in one piece
    for pieces in ([at_limit.replace(b"X-A: 1", b"X-A: 11")], [b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 10**6]):
        with pytest.raises(ReplyError, match="head is over the client's limit"):
            _read(pieces)
    many = b"".join(b"X-A: %d\r\n" % i for i in range(http11.MAX_HEADERS - 5))  # with the five of FIXED: 100
    assert _read([FIXED.replace(b"X-A: 1\r\n", b"X-A: 1\r\n" + many)]).take() == BODY
    with pytest.raises(ReplyError, match=f"more than the client's limit of {http11.MAX_HEADERS} headers"):
        _read([FIXED.replace(b"X-A: 1\r\n", b"X-A: 1\r\nX-B: 2\r\n" + many)])


@settings(max_examples=100, deadline=None)
@given(interim=st.lists(st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n",
                                         b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"]),
                        min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 400), max_size=8))
def test_interim_replies_are_skipped_wherever_the_bytes_are_cut(interim, cuts):
    wire = b"".join(interim) + FIXED
    bounds = [0, *sorted(c for c in cuts if c <= len(wire)), len(wire)]
    reader = _read(wire[a:b] for a, b in zip(bounds, bounds[1:]))
    assert reader.done and reader.reusable and reader.status == 200 and reader.take() == BODY
    assert reader.headers.get("link") is None and reader.headers.get("x-a") == "1, 2"


def test_a_line_that_is_not_utf8_is_a_reply_error_and_long_lines_join_once():
    with pytest.raises(ReplyError, match="not UTF-8"):
        LineSplitter().feed(b'data: {"text": "\xff"}\n')
    lines = LineSplitter()
    assert all(lines.feed(b"x" * 1000) == [] for _ in range(100))
    assert lines.feed(b"\nnext") == ["x" * 100_000] and lines.end() == ["next"]
