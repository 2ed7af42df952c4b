"""Real local alarm receivers for tests: an HTTP server that plays Slack, DingTalk, WeCom,
Feishu and a generic webhook (checking each robot's signature as the vendor does), and an
SMTP server (aiosmtpd) that keeps the messages it receives.

Both run on loopback ports in the test's event loop; ``received`` lists what arrived.
Loopback is an internal address that alarms never reach by default: a test sending to these
receivers admits it with the alarm allow list (:data:`RECEIVERS_ALLOW`, :data:`RECEIVERS_POLICY`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlsplit

import orjson
from aiosmtpd.smtp import SMTP, Envelope, Session

from jobring.core.addresses import alarm_policy_from_text

RECEIVERS_ALLOW = "127.0.0.1"  # JOBRING_ALARM_TARGET_ALLOW of a test sending to these receivers
RECEIVERS_POLICY = alarm_policy_from_text(None, RECEIVERS_ALLOW)
DINGTALK_SECRET = "SECtest-dingtalk-secret"
FEISHU_SECRET = "test-feishu-secret"


@dataclass
class Received:
    kind: str
    body: dict[str, Any]
    signature_ok: bool | None = None  # None: the channel has no signature
    at: float = field(default_factory=time.monotonic)
    host_header: str | None = None


def _dingtalk_ok(query: dict[str, list[str]]) -> bool:
    try:
        stamp, sign = query["timestamp"][0], query["sign"][0]
    except (KeyError, IndexError):
        return False
    expected = base64.b64encode(
        hmac.new(DINGTALK_SECRET.encode(), f"{stamp}\n{DINGTALK_SECRET}".encode(), hashlib.sha256).digest()
    ).decode()
    # DingTalk refuses timestamps more than an hour off.
    return (
        hmac.compare_digest(unquote_plus(sign) if "%" in sign else sign, expected)
        and abs(int(stamp) - time.time() * 1000) < 3600_000
    )


def _feishu_ok(body: dict[str, Any]) -> bool:
    stamp, sign = body.get("timestamp"), body.get("sign")
    if not isinstance(stamp, str) or not isinstance(sign, str):
        return False
    expected = base64.b64encode(
        hmac.new(f"{stamp}\n{FEISHU_SECRET}".encode(), b"", hashlib.sha256).digest()
    ).decode()
    return hmac.compare_digest(sign, expected) and abs(int(stamp) - time.time()) < 3600


class AlarmHttpReceiver:
    """POST /slack, /dingtalk, /wecom, /feishu, /webhook; answers like each service."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.received: list[Received] = []
        self.host = host
        self.port = port
        self.fail_next = 0  # answer this many requests with 503 first
        self.connections = 0  # TCP connections accepted, with or without a request
        self._server: asyncio.Server | None = None
        self.arrived = asyncio.Event()

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def targets(self) -> list[dict[str, Any]]:
        return [
            {"kind": "slack", "url": f"{self.base}/slack"},
            {"kind": "dingtalk", "url": f"{self.base}/dingtalk?access_token=tok", "secret": DINGTALK_SECRET},
            {"kind": "wecom", "url": f"{self.base}/wecom?key=k"},
            {"kind": "feishu", "url": f"{self.base}/feishu", "secret": FEISHU_SECRET},
            {"kind": "webhook", "url": f"{self.base}/webhook"},
        ]

    def of(self, kind: str) -> list[Received]:
        return [r for r in self.received if r.kind == kind]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, answer = self._answer(method, target, body, headers.get("host"))
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{len(answer)}\r\n\r\n".encode()
                    + answer
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, method: str, target: str, raw: bytes, host: str | None) -> tuple[int, bytes]:
        parts = urlsplit(target)
        kind = parts.path.strip("/")
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, b'{"error":"busy"}'
        body = orjson.loads(raw) if raw else {}
        ok: bool | None = None
        if kind == "dingtalk":
            ok = _dingtalk_ok(parse_qs(parts.query, keep_blank_values=True))
            shape = body.get("msgtype") == "markdown" and {"title", "text"} <= set(body.get("markdown", {}))
            ok = ok and shape
        elif kind == "feishu":
            ok = _feishu_ok(body) and body.get("msg_type") == "text" and "text" in body.get("content", {})
        elif kind == "wecom":
            ok = body.get("msgtype") == "markdown" and "content" in body.get("markdown", {})
        elif kind == "slack":
            ok = isinstance(body.get("text"), str) and isinstance(body.get("blocks"), list)
        self.received.append(Received(kind, body, ok, host_header=host))
        self.arrived.set()
        if ok is False:
            return 200, b'{"errcode":310000,"code":19021,"errmsg":"sign not match"}'
        if kind in ("dingtalk", "wecom"):
            return 200, b'{"errcode":0,"errmsg":"ok"}'
        if kind == "feishu":
            return 200, b'{"code":0,"msg":"success","data":{}}'
        return 200, b"ok" if kind == "slack" else b"{}"


class _Keep:
    def __init__(self, box: list[Message]) -> None:
        self.box = box

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        self.box.append(message_from_bytes(content))
        return "250 Message accepted for delivery"


class SmtpReceiver:
    """An aiosmtpd SMTP server on a loopback port, in the running event loop."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        handler = _Keep(self.messages)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: SMTP(handler, loop=loop), "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
