"""The sans-IO HTTP/1.1 wire (``lab.design.http``) and Queuefka's routes on it
(``lab.backends.queuefka.wire.http``), driven with bytes: no socket, no world's network.

``run`` feeds a connection bytes and runs its requests the way a world does (next_request,
handle, until None or a close); ``replies`` reads what it sent with the client's
``ResponseReader``, one response after another."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.wire.http import HEADER_TIMEOUT, MAX_WAIT, accept_http
from lab.worlds.live import LiveWorld
from lab.design.http import Request, Response, error, json_response
from lab.design.http_client import HttpReply, ResponseReader, encode_request
from lab.design.http_router import Router
from lab.design.http_server import HttpServerConnection, encode_response
from tests.test_core_purity import ROOT, forbidden_chains


# -- helpers ---------------------------------------------------------------------------------

async def run(conn: HttpServerConnection, *chunks: bytes) -> tuple[bytes, bool]:
    """Feed ``chunks`` one after another, running every request each makes complete; what the
    connection sent, and whether it is still open."""
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    for chunk in chunks:
        conn.feed(chunk)
        while (request := conn.next_request()) is not None:
            if not await conn.handle(request, send):
                return b"".join(sent), False
    return b"".join(sent), True


def replies(data: bytes, *methods: str) -> list[HttpReply]:
    """Every response in ``data`` (one per method given, "GET" by default), fed in pieces of
    7 bytes to show the reader does not need a response in one chunk; nothing may be left."""
    out = []
    for method in methods or ("GET",) * data.count(b"HTTP/1.1 "):
        reader = ResponseReader(method)
        reply = None
        while reply is None:
            assert data, f"the bytes ended before the response to {method}: {out}"
            piece, data = data[:7], data[7:]
            reply = reader(piece)
        data = reader.trailing + data
        out.append(reply)
    assert data == b"", data
    return out


def sync(coro: Any) -> Any:
    return asyncio.run(coro)


def req(method: str, target: str, body: bytes = b"", *headers: tuple[str, str]) -> bytes:
    return encode_request(method, target, "lab", body, headers)


class Calls:
    """A router with a few routes that record their requests."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.router = Router()
        self.router.get("/items/{item}", self.show)
        self.router.post("/items/{item}", self.show)
        self.router.put("/items/{item}/tags/{tag}", self.show)
        self.router.get("/", self.show)
        self.router.get("/boom", self.boom)

    async def show(self, request: Request) -> Response:
        self.seen.append(request)
        return json_response({"method": request.method, "path": request.path, "params": request.params,
                              "query": request.query, "body": request.body.decode("latin-1"),
                              "agent": request.headers.get("user-agent")})

    async def boom(self, request: Request) -> Response:
        self.seen.append(request)
        return {}["no such key"]  # type: ignore[return-value]

    def connection(self, max_body: int = 100, **kw: Any) -> HttpServerConnection:
        return HttpServerConnection(self.router, max_body=max_body, header_timeout=2.5, **kw)


# -- the server connection and the router ------------------------------------------------------

def test_routes_decode_params_query_and_headers():
    calls = Calls()
    conn = calls.connection()
    assert (conn.timeout, conn.idle_resets_on_data) == (2.5, False)
    out, open_ = sync(run(conn, req("GET", "/items/a%20b?x=1&x=2&y=&z=%C3%A9+f", b"", ("User-Agent", "Lab/1")),
                          req("POST", "/items/7", b"payload"), req("GET", "/")))
    assert open_
    a, b, c = (json.loads(r.body) for r in replies(out))
    assert a == {"method": "GET", "path": "/items/a b", "params": {"item": "a b"},
                 "query": {"x": "1", "y": "", "z": "é f"}, "body": "", "agent": "Lab/1"}
    assert (b["method"], b["params"], b["body"]) == ("POST", {"item": "7"}, "payload")
    assert (c["path"], c["params"]) == ("/", {})
    assert calls.seen[0].headers["host"] == "lab" and calls.seen[0].raw_path == "/items/a%20b"


def test_unknown_path_is_404_and_wrong_method_is_405_with_allow():
    calls = Calls()
    out, open_ = sync(run(calls.connection(), req("GET", "/nowhere"), req("GET", "/items"), req("GET", "/items/"),
                          req("GET", "/items/1/tags/x"), req("DELETE", "/items/1"), req("HEAD", "/items/1")))
    assert open_
    r404, r404b, r404c, r405a, r405b, head = replies(out, "GET", "GET", "GET", "GET", "DELETE", "HEAD")
    for reply in (r404, r404b, r404c):
        assert reply.status == 404 and reply.headers["content-type"] == "application/json; charset=utf-8"
    assert json.loads(r404.body) == {"error": "nothing at /nowhere"}
    assert r405a.status == 405 and r405a.headers["allow"] == "PUT"
    assert json.loads(r405a.body) == {"error": "GET is not allowed on /items/1/tags/x: use PUT"}
    assert r405b.status == 405 and r405b.headers["allow"] == "GET,HEAD,POST"
    assert "use GET, HEAD, POST" in json.loads(r405b.body)["error"]
    # a GET route answers HEAD: the GET's headers, Content-Length included, and no body
    assert head.status == 200 and head.body == b"" and int(head.headers["content-length"]) > 0
    assert [r.method for r in calls.seen] == ["HEAD"]


def test_an_exception_in_a_handler_is_a_json_500_and_the_connection_goes_on(caplog):
    calls = Calls()
    out, open_ = sync(run(calls.connection(), req("GET", "/boom"), req("GET", "/items/after")))
    assert open_
    boom, after = replies(out)
    assert boom.status == 500 and json.loads(boom.body) == {"error": "internal error: KeyError: 'no such key'"}
    assert after.status == 200 and json.loads(after.body)["params"] == {"item": "after"}
    assert "GET /boom failed" in caplog.text


@pytest.mark.parametrize("garbage, status, words", [
    (b"GARBAGE / HTTP/1.1\r\nhost: x\r\n\r\n", 400, "unknown method 'GARBAGE'"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "bad HTTP request"),
    (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400, "bad HTTP request"),
    (b"GET / HTTP/1.1\r\n\r\n", 400, "Host"),  # HTTP/1.1 needs a Host
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 300, 431, "bad HTTP request"),  # never ends, too long
])
def test_a_request_that_is_not_http_gets_a_json_error_then_the_connection_closes(garbage, status, words):
    calls = Calls()
    conn = calls.connection(max_header_bytes=256)
    out, open_ = sync(run(conn, garbage, req("GET", "/")))
    assert not open_
    [reply] = replies(out)
    assert reply.status == status and reply.headers["connection"] == "close"
    assert words in json.loads(reply.body)["error"] and json.loads(reply.body)["error"].startswith("bad HTTP request")
    assert calls.seen == [] and conn.next_request() is None  # nothing after it runs


def test_a_content_length_over_the_limit_is_a_413_before_the_body_arrives():
    calls = Calls()
    head = b"POST /items/1 HTTP/1.1\r\nhost: x\r\ncontent-length: 101\r\n\r\n"
    out, open_ = sync(run(calls.connection(max_body=100), head))  # the body is never sent
    assert not open_ and calls.seen == []
    [reply] = replies(out)
    assert reply.status == 413 and "100" in json.loads(reply.body)["error"]
    # exactly the limit is fine
    out, open_ = sync(run(calls.connection(max_body=100), req("POST", "/items/1", b"x" * 100)))
    assert open_ and replies(out)[0].status == 200 and calls.seen[0].body == b"x" * 100


def chunked(target: str, *pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return b"POST %s HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n%s" % (target.encode(), body)


def test_a_chunked_body_is_joined_and_refused_once_it_passes_the_limit():
    calls = Calls()
    data = chunked("/items/c", b"abc", b"defg")[:-1]  # without its last byte
    conn = calls.connection(max_body=10)
    out, open_ = sync(run(conn, data[:40], data[40:], b"\n"))
    assert open_ and calls.seen[0].body == b"abcdefg" and replies(out)[0].status == 200
    out, open_ = sync(run(calls.connection(max_body=10), chunked("/items/c", b"123456", b"7890X", b"more")))
    assert not open_ and len(calls.seen) == 1
    [reply] = replies(out)
    assert reply.status == 413 and "10" in json.loads(reply.body)["error"]


def test_pipelined_requests_in_one_feed_are_answered_in_order():
    calls = Calls()
    conn = calls.connection()
    third = req("POST", "/items/3", b"three")
    out, open_ = sync(run(conn, req("GET", "/items/1") + req("POST", "/items/2", b"two") + third[:30], third[30:]))
    assert open_
    assert [json.loads(r.body)["params"]["item"] for r in replies(out)] == ["1", "2", "3"]
    assert calls.seen[2].body == b"three"


def test_connection_close_and_http_1_0_close_after_their_response():
    calls = Calls()
    out, open_ = sync(run(calls.connection(), req("GET", "/items/1", b"", ("Connection", "keep-alive, Close")),
                          req("GET", "/items/2")))
    assert not open_ and [r.params["item"] for r in calls.seen] == ["1"]
    [reply] = replies(out)
    assert reply.status == 200 and reply.headers["connection"] == "close"
    out, open_ = sync(run(calls.connection(), b"GET /items/3 HTTP/1.0\r\n\r\n"))
    assert not open_ and replies(out)[0].status == 200


def test_keep_alive_serves_request_after_request():
    calls = Calls()
    conn = calls.connection()
    for i in range(5):
        out, open_ = sync(run(conn, req("POST", f"/items/{i}", b"%d" % i)))
        [reply] = replies(out)
        assert open_ and reply.status == 200 and "connection" not in reply.headers
        assert json.loads(reply.body)["body"] == str(i)
    assert len(calls.seen) == 5
    conn.lost()
    assert conn.next_request() is None


def test_expect_100_continue_is_answered_before_the_body():
    calls = Calls()
    conn = calls.connection()
    head = b"POST /items/e HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
    out, open_ = sync(run(conn, head))
    assert open_ and out == b"HTTP/1.1 100 Continue\r\n\r\n" and calls.seen == []
    out, open_ = sync(run(conn, b"body"))
    assert open_ and calls.seen[0].body == b"body" and replies(out)[0].status == 200


def test_the_header_limit_counts_the_section_to_the_byte_however_it_arrives():
    head = b"GET /items/1 HTTP/1.1\r\nhost: x\r\nx-big: "
    fits = head + b"a" * (256 - len(head) - 4) + b"\r\n\r\n"  # exactly 256 bytes
    over = head + b"a" * (257 - len(head) - 4) + b"\r\n\r\n"
    for data in (fits, over):
        for chunks in ([data], [data[i:i + 1] for i in range(len(data))]):
            out, open_ = sync(run(Calls().connection(max_header_bytes=256), *chunks))
            assert [r.status for r in replies(out)] == ([200] if data is fits else [431]) and open_ == (data is fits)


def test_an_upgrade_is_declined_and_the_connection_goes_on_in_http_1_1():
    calls = Calls()
    h2c = b"GET /items/u HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n\r\n"
    with_body = (b"POST /items/b HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: x\r\ncontent-length: 3\r\n\r\n"
                 b"abc")
    data = b"\r\n" + h2c + with_body + req("GET", "/items/after")  # a blank line before a request is skipped
    for chunks in ([data], [data[i:i + 1] for i in range(len(data))]):
        calls.seen.clear()
        out, open_ = sync(run(calls.connection(), *chunks))
        assert open_ and [r.status for r in replies(out)] == [200, 200, 200]
        assert [(r.params["item"], r.body) for r in calls.seen] == [("u", b""), ("b", b"abc"), ("after", b"")]


def test_responses_have_a_content_length_but_204_and_refuse_header_injection():
    assert encode_response(Response(204, b"ignored", {"X-Next": "3"})) == b"HTTP/1.1 204 No Content\r\nX-Next: 3\r\n\r\n"
    assert encode_response(Response(200, b"abc", {"Content-Length": "99"})) == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc")
    assert encode_response(error(418, "tea"), close=True, head_only=True) == (
        b"HTTP/1.1 418 I'm a Teapot\r\ncontent-length: 16\r\ncontent-type: application/json; charset=utf-8\r\n"
        b"connection: close\r\n\r\n".replace(b"content-type", b"Content-Type"))
    with pytest.raises(ValueError, match="CR or LF"):
        encode_response(Response(200, b"", {"X-Evil": "a\r\nSet-Cookie: x=1"}))


# -- the client side -------------------------------------------------------------------------

def test_encode_request_and_response_reader_round_trip_through_the_server():
    calls = Calls()
    data = encode_request("POST", "/items/r?x=%2F", "example:80", b"\x00\xffbody", [("User-Agent", "t")])
    assert data.startswith(b"POST /items/r?x=%2F HTTP/1.1\r\nhost: example:80\r\nUser-Agent: t\r\ncontent-length: 6\r\n")
    assert encode_request("GET", "/", "h") == b"GET / HTTP/1.1\r\nhost: h\r\n\r\n"  # no body, no length
    out, _ = sync(run(calls.connection(), data))
    reader = ResponseReader("POST")
    assert all(reader(out[i:i + 1]) is None for i in range(len(out) - 1))  # byte by byte
    reply = reader(out[-1:])
    assert reply.status == 200 and reply.headers["content-length"] == str(len(reply.body))
    assert json.loads(reply.body)["query"] == {"x": "/"} and calls.seen[0].body == b"\x00\xffbody"
    for bad in (("GET", "/a b\r\nX: y", "h"), ("GET", "/", "h\n"), ("GET", "/", "h", b"", [("X", "1\r")])):
        with pytest.raises(ValueError, match="CR or LF"):
            encode_request(*bad)


def test_the_reader_takes_chunked_close_delimited_head_and_1xx_responses():
    reader = ResponseReader()
    assert reader(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nX-A: 2\r\n\r\n3\r\nabc\r\n") is None
    assert reader(b"2\r\nde\r\n0\r\n\r\n") == (200, {"transfer-encoding": "chunked", "x-a": "1, 2"}, b"abcde")
    reader = ResponseReader()
    assert reader(b"HTTP/1.1 200 OK\r\n\r\npart ") is None and reader(b"two") is None
    assert reader(b"") == (200, {}, b"part two")  # the connection closed: the end of that body
    assert ResponseReader("HEAD")(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n") == (200, {"content-length": "9"}, b"")
    reader = ResponseReader("POST")
    assert reader(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok") == (
        201, {"content-length": "2"}, b"ok")


def test_the_reader_stops_at_the_end_of_its_response_and_leaves_the_rest():
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=1\r\na\nc\r\n0\r\nx-trailer: 1\r\n\r\n"
    sized = b"HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\n\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n"
    data = chunked + sized + head + sized
    for size in (1, 2, 7, len(data)):
        got = []
        for method in ("GET", "POST", "HEAD", "GET"):
            reader, reply = ResponseReader(method), None
            while reply is None:
                piece, data = data[:size], data[size:]
                reply = reader(piece)
            data = reader.trailing + data
            got.append(reply)
        assert got == [(200, {"transfer-encoding": "chunked"}, b"a\nc"), (201, {"content-length": "4"}, b"\r\n\r\n"),
                       (200, {"content-length": "9"}, b""), (201, {"content-length": "4"}, b"\r\n\r\n")]
        assert data == b""
        data = chunked + sized + head + sized


@pytest.mark.parametrize("chunks", [
    [b"SSH-2.0-OpenSSH_9.6\r\n"],
    [b"HTTP/1.1 abc Nope\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", b""],  # closed too soon
    [b"HTTP/1.1 2", b""],  # closed in the status line
    [b""],  # closed before anything
])
def test_a_malformed_response_raises_value_error(chunks):
    reader = ResponseReader()
    with pytest.raises(ValueError):
        for chunk in chunks:
            assert reader(chunk) is None


def test_the_wire_modules_import_no_clock_os_or_world():
    for path in (*sorted((ROOT / "lab/design").glob("http*.py")), ROOT / "lab/backends/queuefka/wire/http.py"):
        assert forbidden_chains(path) == [], path


# -- Queuefka's routes over the sans-IO connection --------------------------------------------

def queuefka(tmp_path: Path, exercise, **http: Any) -> Any:
    """Run ``await exercise(call, core)`` on a real core on the live world; ``call(method,
    target, body=b"", json=None)`` sends one request through a fresh connection of
    ``accept_http(core, **http)`` and returns (status, headers, body or its JSON)."""
    world = LiveWorld(root=tmp_path, disk_roots={"q": tmp_path / "data"})
    cores: list[QueuefkaCore] = []

    async def boot(rt):
        cores.append(QueuefkaCore(rt, Config()))

    async def main(_control):
        await world.start("q", boot)
        accept = accept_http(cores[0], **http)

        async def call(method: str, target: str, body: bytes = b"", json_body: Any = None):
            if json_body is not None:
                body = json.dumps(json_body).encode()
            conn = accept()
            out, _ = await run(conn, encode_request(method, target, "q", body))
            [reply] = replies(out, method)
            is_json = reply.headers.get("content-type", "").startswith("application/json")
            return reply.status, reply.headers, json.loads(reply.body) if is_json else reply.body

        try:
            return await exercise(call, cores[0])
        finally:
            cores[0].close()

    return world.run(main)


def test_queuefka_round_trip_over_the_sans_io_front(tmp_path: Path):
    async def exercise(call, core):
        addresses = [(await call("POST", "/topics/orders/messages", body))[2]["address"]
                     for body in (b"first", b"", b"third")]
        assert addresses == [0, 13, 21]
        status, _, body = await call("GET", "/topics/orders/messages?group=g&max=2")
        assert (status, body) == (200, {"records": [{"address": 0, "payload": base64.b64encode(b"first").decode()},
                                                    {"address": 13, "payload": ""}], "next": 21})
        assert await call("POST", "/topics/orders/groups/g/commit", json_body={"address": 21}) == (
            200, {"content-type": "application/json; charset=utf-8", "content-length": "17"}, {"committed": 21})
        status, headers, body = await call("GET", "/topics/orders/messages?group=g&format=raw")
        assert (status, body, headers["queuefka-address"], headers["queuefka-next"]) == (200, b"third", "21", "34")
        assert headers["content-type"] == "application/octet-stream"
        status, headers, body = await call("GET", "/topics/orders/messages?group=g&format=raw&wait=0.05")
        assert (status, body, headers["queuefka-next"], "content-length" in headers) == (204, b"", "34", False)
        status, _, stats = await call("GET", "/topics/orders")
        assert stats["end_address"] == 34 and stats["groups"]["g"] == {"committed": 21, "lag_bytes": 13, "position": 34}
        assert await call("PUT", "/topics/orders/groups/late", json_body={"start": 13}) == (
            201, {"content-type": "application/json; charset=utf-8", "content-length": "17"}, {"committed": 13})
        assert (await call("PUT", "/topics/orders/groups/late"))[0] == 409
        assert (await call("DELETE", "/topics/orders/groups/late"))[2] == {"deleted": "late"}
        assert (await call("GET", "/topics"))[2] == {"topics": ["orders"]}

    queuefka(tmp_path, exercise)


def test_queuefka_refusals_over_the_sans_io_front_are_json_and_write_nothing(tmp_path: Path):
    async def exercise(call, core):
        await call("POST", "/topics/orders/messages", b"first")
        await call("GET", "/topics/orders/messages?group=g")  # a commit acknowledges what was handed out
        await call("POST", "/topics/orders/groups/g/commit", json_body={"address": 13})
        refused = [
            (await call("GET", "/topics/orders/messages"), 400, "group=NAME is required"),
            (await call("GET", "/topics/orders/messages?group=g&max=0"), 400, "max=0: use 1 to 10000"),
            (await call("GET", "/topics/orders/messages?group=g&max=ten"), 400, "max='ten' is not a number"),
            (await call("GET", f"/topics/orders/messages?group=g&wait={MAX_WAIT + 1}"), 400, "wait"),
            (await call("GET", "/topics/orders/messages?group=g&mode=twice"), 400, "mode"),
            (await call("GET", "/topics/orders/messages?group=g&format=xml"), 400, "use json or raw"),
            (await call("GET", "/topics/orders/messages?group=g&format=raw&max=2"), 400, "use max=1"),
            (await call("GET", "/topics/orders/messages?group=bad+name%21"), 400, "group name"),
            (await call("POST", "/topics/bad%20topic/messages", b"x"), 400, "topic name"),
            (await call("POST", "/topics/orders/groups/g/commit", b"{not json"), 400, "JSON"),
            (await call("POST", "/topics/orders/groups/g/commit", json_body={"address": "21"}), 400, "integer"),
            (await call("POST", "/topics/orders/groups/g/commit", json_body={"address": 5}), 400,
             "not a record address"),
            (await call("PUT", "/topics/orders/groups/x", json_body={"from": 0}), 400, "start"),
            (await call("GET", "/topics/unknown"), 404, "no topic 'unknown'"),
            (await call("GET", "/topics/unknown/messages?group=g"), 404, "no topic"),
            (await call("DELETE", "/topics/orders/groups/nobody"), 404, "no group 'nobody'"),
            (await call("GET", "/nowhere"), 404, "nothing at /nowhere"),
            (await call("DELETE", "/topics/orders/messages"), 405, "use GET, HEAD, POST"),
            (await call("POST", "/topics/orders/messages", b"x" * 65), 413, "64"),
        ]
        for (status, headers, body), want, words in refused:
            assert (status, headers["content-type"]) == (want, "application/json; charset=utf-8"), body
            assert words in body["error"], body
        assert refused[-2][0][1]["allow"] == "GET,HEAD,POST"
        stats = (await call("GET", "/topics/orders"))[2]
        assert stats["end_address"] == 13 and set(stats["groups"]) == {"g"}  # no x, no unknown
        assert stats["groups"]["g"]["committed"] == 13
        assert core.topic_names() == ["orders"]

    queuefka(tmp_path, exercise, max_payload=64)


def test_accept_http_builds_header_timed_connections_and_checks_its_settings(tmp_path: Path):
    async def exercise(call, core):
        conn = accept_http(core)()
        assert (conn.timeout, conn.idle_resets_on_data, conn.max_body) == (HEADER_TIMEOUT, False, 256 << 20)
        assert accept_http(core, header_timeout=0.3)().timeout == 0.3
        with pytest.raises(ValueError, match="header timeout 0"):
            accept_http(core, header_timeout=0)
        # a long poll is one running request: it is answered when a record arrives
        poll = asyncio.ensure_future(call("GET", "/topics/t/messages?group=g&wait=5"))
        await asyncio.sleep(0.05)
        assert not poll.done()
        return poll

    # the topic must exist before a fetch waits on it
    async def with_topic(call, core):
        await call("POST", "/topics/t/messages", b"seed")
        await call("PUT", "/topics/t/groups/g", json_body={"start": "end"})
        poll = await exercise(call, core)
        await call("POST", "/topics/t/messages", b"late")
        status, _, body = await asyncio.wait_for(poll, 2)
        return status, [base64.b64decode(r["payload"]) for r in body["records"]]

    assert queuefka(tmp_path, with_topic) == (200, [b"late"])
