"""The shared HTTP edge: head limits (HeadMeter, feed_head), security headers, and the
protocol's integer ranges."""

from __future__ import annotations

from typing import Any

import httptools
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from jobring.protocol.edge import SECURITY_HEADERS, HeadLimits, HeadMeter, SecurityHeaders, feed_head
from jobring.protocol.models import HandleCallbackParam, LogParam, ProtocolError, TriggerParam

LIMITS = HeadLimits(max_request_line=100, max_header_bytes=200)


class _Parsed:
    """A parser target recording what httptools reports, feeding the meter as the servers do."""

    def __init__(self, meter: HeadMeter) -> None:
        self.meter = meter
        self.verdicts: list[int | None] = []
        self.messages = 0

    def on_url(self, url: bytes) -> None:
        self.meter.url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.meter.header(name, value)

    def on_headers_complete(self) -> None:
        self.verdicts.append(self.meter.headers_done())

    def on_message_complete(self) -> None:
        self.messages += 1
        self.meter.message_done()


def feed(data: bytes, *, chunk: int | None = None) -> tuple[int | None, _Parsed, int]:
    meter = HeadMeter(LIMITS)
    target = _Parsed(meter)
    parser = httptools.HttpRequestParser(target)
    fed = 0

    def counted(part: bytes) -> None:
        nonlocal fed
        fed += len(part)
        parser.feed_data(part)

    step = chunk or len(data)
    for start in range(0, len(data), step):
        verdict = feed_head(meter, data[start:start + step], counted)
        if verdict is not None:
            return verdict, target, fed
    return None, target, fed


def test_a_head_within_the_limits_passes_also_byte_by_byte() -> None:
    raw = b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    for chunk in (None, 1, 7):
        verdict, target, _ = feed(raw, chunk=chunk)
        assert (verdict, target.verdicts, target.messages) == (None, [None], 1)


def test_an_over_long_request_line_is_414_before_much_is_buffered() -> None:
    verdict, _, fed = feed(b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
    assert verdict == 414
    assert fed <= LIMITS.max_request_line + LIMITS.max_header_bytes + 1
    # Complete but too long, all in one read: the same answer.
    verdict, target, _ = feed(b"GET /" + b"a" * 150 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (verdict, target.verdicts) == (None, [414])


def test_over_large_headers_are_431_one_big_or_many_small() -> None:
    verdict, _, fed = feed(b"GET / HTTP/1.1\r\nX-Big: " + b"v" * 1_000_000 + b"\r\n\r\n", chunk=4096)
    assert verdict == 431 and fed <= 301
    many = b"".join(b"X-%d: vvvvvvvvvv\r\n" % n for n in range(15))
    verdict, target, _ = feed(b"GET / HTTP/1.1\r\n" + many + b"\r\n")
    assert verdict == 431 or target.verdicts == [431]


def test_each_pipelined_request_gets_its_own_allowance() -> None:
    one = b"GET /x HTTP/1.1\r\nHost: " + b"h" * 150 + b"\r\n\r\n"
    verdict, target, _ = feed(one * 5, chunk=len(one))
    assert (verdict, target.messages, target.verdicts) == (None, 5, [None] * 5)


def _app() -> Any:
    async def plain(request: Request) -> Response:
        return PlainTextResponse("hi", headers={"X-Frame-Options": "SAMEORIGIN"})

    return SecurityHeaders(Starlette(routes=[Route("/", plain)]))


async def test_security_headers_are_added_but_never_overwrite_a_route_s_own() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_app()), base_url="http://t") as client:
        for path in ("/", "/missing"):
            response = await client.get(path)
            for name, value in SECURITY_HEADERS:
                if name != b"x-frame-options":
                    assert response.headers[name.decode()] == value.decode()
        assert (await client.get("/")).headers.get_list("x-frame-options") == ["SAMEORIGIN"]
        assert (await client.get("/missing")).headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize(("model", "body", "field"), [
    (TriggerParam, {"jobId": 1, "logId": 2**64}, "logId"),
    (TriggerParam, {"jobId": 1, "logId": 1.8e19}, "logId"),
    (TriggerParam, {"jobId": 2**31}, "jobId"),
    (TriggerParam, {"jobId": 1, "logDateTime": -(2**63) - 1}, "logDateTime"),
    (TriggerParam, {"jobId": 1, "broadcastTotal": "99999999999"}, "broadcastTotal"),
    (HandleCallbackParam, {"logId": 2**63, "handleCode": 200}, "logId"),
    (HandleCallbackParam, {"logId": 1, "handleCode": 2**40}, "handleCode"),
    (LogParam, {"logId": 1, "fromLineNum": 10**30}, "fromLineNum"),
])
def test_integers_outside_the_wire_types_are_refused_naming_the_field(
    model: Any, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ProtocolError, match=field):
        model.decode(body)


def test_integers_at_the_edges_of_the_wire_types_pass() -> None:
    param = TriggerParam.decode({"jobId": 2**31 - 1, "logId": 2**63 - 1, "logDateTime": -(2**63)})
    assert (param.job_id, param.log_id, param.log_date_time) == (2**31 - 1, 2**63 - 1, -(2**63))
    with pytest.raises(ProtocolError, match="logId"):
        TriggerParam.decode({"jobId": 1, "logId": float("inf")})
