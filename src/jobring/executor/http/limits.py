"""Limits of the executor's standalone HTTP/1.1 server and the closing answers it refuses with.

The request head has its own limits (:class:`jobring.protocol.edge.HeadLimits`, shared with
the admin); these cover the rest: the body, slow clients, clients that do not read their
answers, and how many connections are served at once (and kept for clients that have not
presented the access token).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobring.executor.http.decode import MAX_BODY_BYTES
from jobring.protocol.edge import HEAD_REFUSALS, closing_answer
from jobring.protocol.models import ReturnT


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one connection (and the server) may hold; the defaults suit an executor."""

    max_body_bytes: int = MAX_BODY_BYTES
    # From the end of the head to the end of the body (a trickled body is answered 408).
    body_timeout_s: float = 30.0
    max_connections: int = 1024
    # Connections that have not presented the access token yet (see .admission): in total, per
    # client address, and how long one may stay idle.
    max_unauthenticated: int = 256
    max_unauthenticated_per_address: int = 32
    unauthenticated_idle_timeout_s: float = 5.0
    # Answers owed on one connection (pipelined requests) before it stops reading more.
    max_pipelined: int = 32
    # Answers written but not yet taken by the client: above high, stop reading requests
    # until the buffer is below low again.
    write_high_water: int = 256 * 1024
    write_low_water: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.max_body_bytes < 0 or self.body_timeout_s <= 0 or self.max_connections < 1:
            raise ValueError("max_body_bytes >= 0, body_timeout_s > 0 and max_connections >= 1")
        if self.max_pipelined < 1 or not 0 <= self.write_low_water <= self.write_high_water:
            raise ValueError("max_pipelined >= 1 and 0 <= write_low_water <= write_high_water")
        if (self.max_unauthenticated < 1 or self.max_unauthenticated_per_address < 1
                or self.unauthenticated_idle_timeout_s <= 0):
            raise ValueError("max_unauthenticated >= 1, max_unauthenticated_per_address >= 1 and "
                             "unauthenticated_idle_timeout_s > 0")


BODY_TIMED_OUT = "request body not received in time"
TOO_MANY_CONNECTIONS = "too many connections"

def body_too_large(limit: int) -> str:
    return f"request error:request body larger than {limit} bytes"


def refusal_reason(status: int, limits: ServerLimits, *, in_body: bool = False) -> str:
    """The ReturnT message of a refusal (head refusals say what the admin's server says)."""
    if status == 413:
        return body_too_large(limits.max_body_bytes)
    if status == 503:
        return TOO_MANY_CONNECTIONS
    if status == 408 and in_body:
        return BODY_TIMED_OUT
    return HEAD_REFUSALS[status]


def error_answer(status: int, msg: str) -> bytes:
    """A complete closing answer with a ReturnT body (the envelope XXL-JOB clients read)."""
    return closing_answer(status, b"application/json;charset=UTF-8", ReturnT.fail(msg).encode())


BAD_REQUEST = error_answer(400, "invalid HTTP request")
