"""Request bodies to protocol models: the /run fast path and the ASGI body reader."""

from __future__ import annotations

import orjson

from jobring.protocol.edge import Receive
from jobring.protocol.models import (
    WORKFLOW_CONTEXT_FIELD,
    ProtocolError,
    TriggerParam,
    in_int32,
    in_int64,
)

# glueSource travels in /run; anything larger than this is not a sane request.
MAX_BODY_BYTES = 8 * 1024 * 1024


def decode_trigger(body: bytes) -> TriggerParam:
    """TriggerParam.decode with a fast path for the complete, well-typed body admins send."""
    try:
        d = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(str(exc)) from exc
    if type(d) is not dict:
        return TriggerParam.decode(body)  # raises the usual message
    return trigger_of(d)


def trigger_of(d: object) -> TriggerParam:
    """:func:`decode_trigger` of a body already decoded (one run of a broker batch)."""
    if type(d) is not dict:
        raise ProtocolError(f"a run must be a JSON object, not {type(d).__name__}")
    try:
        job_id, handler, params = d["jobId"], d["executorHandler"], d["executorParams"]
        block, timeout, log_id = d["executorBlockStrategy"], d["executorTimeout"], d["logId"]
        log_time, glue_type, glue_source = d["logDateTime"], d["glueType"], d["glueSource"]
        glue_time, index, total = d["glueUpdatetime"], d["broadcastIndex"], d["broadcastTotal"]
    except KeyError:
        return TriggerParam.decode(d)
    if (
        type(job_id) is int and type(timeout) is int and type(log_id) is int and type(log_time) is int
        and type(glue_time) is int and type(index) is int and type(total) is int
        and type(handler) is str and type(params) is str and type(block) is str
        and type(glue_type) is str and type(glue_source) is str
        and in_int32(job_id) and in_int32(timeout) and in_int32(index) and in_int32(total)
        and in_int64(log_id) and in_int64(log_time) and in_int64(glue_time)
    ):
        logical, start = d.get("logicalTime"), d.get("dataIntervalStart")
        context = d.get(WORKFLOW_CONTEXT_FIELD)
        if (logical is None or (type(logical) is int and in_int64(logical))) and (
            start is None or (type(start) is int and in_int64(start))
        ) and (context is None or type(context) is dict):
            return TriggerParam(job_id, handler, params, block, timeout, log_id, log_time, glue_type,
                                glue_source, glue_time, index, total, logical, start, context)
    return TriggerParam.decode(d)  # nulls, numbers as strings, wrong types: the full checks


async def read_body(receive: Receive) -> bytes:
    """The whole body of an ASGI request; ProtocolError past MAX_BODY_BYTES."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False) and len(body) <= MAX_BODY_BYTES:
        return body  # the usual case: one message
    chunks = [body]
    size = len(body)
    while message.get("more_body", False) and size <= MAX_BODY_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
    if size > MAX_BODY_BYTES:
        raise ProtocolError(f"request body larger than {MAX_BODY_BYTES} bytes")
    return b"".join(chunks)




MAX_RECEIVED_QUERY = 10_000  # runs per /received question


def decode_received(body: bytes) -> list[tuple[int, int]]:
    """``{"runs": [[logId, logDateTime], ...]}`` of a /received question (ValueError if not)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or len(runs) > MAX_RECEIVED_QUERY:
        raise ValueError(f"runs: a list of at most {MAX_RECEIVED_QUERY} [logId, logDateTime] pairs")
    found: list[tuple[int, int]] = []
    for item in runs:
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)):
            raise ValueError("runs: each item is [logId, logDateTime] (non-negative integers)")
        found.append((item[0], item[1]))
    return found
