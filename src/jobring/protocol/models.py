"""XXL-JOB 2.x wire models and their JSON codec.

Field names on the wire are camelCase and spelled as the reference spells them
(``logDateTim`` in LogParam and HandleCallbackParam). Unknown fields are ignored;
``None`` fields are omitted when encoding, as the Java side does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from jobring.errors import JobringError

ACCESS_TOKEN_HEADER = "XXL-JOB-ACCESS-TOKEN"
# XXL-JOB 3.5: the caller's executor appname, sent both ways next to the token.
APPNAME_HEADER = "XXL-JOB-APPNAME"
PROTOCOLS = ("auto", "2", "3", "3.5")
SUCCESS_CODE = 200
FAIL_CODE = 500

MSG_TOKEN_WRONG = "The access token is wrong."
MSG_METHOD_NOT_SUPPORTED = "invalid request, HttpMethod not support."
# A 3.5 executor's answer to a call without XXL-JOB-APPNAME (it checks that before the path).
MSG_V35_APP_MISSING = "invalid request, accessToken or appname is empty."


def msg_uri_not_found(uri: str) -> str:
    return f"invalid request, uri-mapping({uri}) not found."


# jobring extension field (in /run bodies and callback items) carrying a workflow's context.
WORKFLOW_CONTEXT_FIELD = "workflowContext"


class ProtocolError(JobringError, ValueError):
    """A request body that does not decode to the expected wire model."""


# The reference's Java types: ids and instants are long, the rest int. A value outside its
# type is refused here, at decode time: further in it would fail far from the request
# (a result that cannot be encoded again, a database column that overflows).
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _int(data: dict[str, Any], key: str, default: int = 0, bounds: tuple[int, int] = INT32) -> int:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ProtocolError(f"field {key!r} must be an integer")
    try:
        number = int(value)
    except (ValueError, OverflowError) as exc:  # "x", NaN, infinity
        raise ProtocolError(f"field {key!r} must be an integer") from exc
    if not bounds[0] <= number <= bounds[1]:
        raise ProtocolError(f"field {key!r} is out of range ({bounds[0]}..{bounds[1]})")
    return number


def _long(data: dict[str, Any], key: str, default: int = 0) -> int:
    return _int(data, key, default, INT64)


def _optional_long(data: dict[str, Any], key: str) -> int | None:
    return None if data.get(key) is None else _int(data, key, 0, INT64)


def _optional_object(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise ProtocolError(f"{key} must be a JSON object")


def in_int32(value: int) -> bool:
    return INT32[0] <= value <= INT32[1]


def in_int64(value: int) -> bool:
    return INT64[0] <= value <= INT64[1]


def _str(data: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ProtocolError(f"field {key!r} must be a string")
    return value


def _text(value: Any) -> str | None:
    # A handler result that is not a string (pyxxl sends the handler's return value as it is)
    # is kept as its JSON text rather than refusing the whole callback batch.
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _object(body: bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, dict):
        return body
    if not body.strip():
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(str(exc)) from exc
    if not isinstance(data, dict):
        raise ProtocolError("request body must be a JSON object")
    return data


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


@dataclass(slots=True)
class ReturnT:
    code: int = SUCCESS_CODE
    msg: str | None = None
    content: Any = None

    @property
    def ok(self) -> bool:
        return self.code == SUCCESS_CODE

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code}
        if self.msg is not None:
            out["msg"] = self.msg
        if self.content is not None:
            # 2.x-3.2 read "content", 3.3+ read "data"; each side ignores the other field.
            out["content"] = self.content
            out["data"] = self.content
        return out

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def success(cls, content: Any = None) -> ReturnT:
        return cls(SUCCESS_CODE, None, content)

    @classmethod
    def fail(cls, msg: str) -> ReturnT:
        return cls(FAIL_CODE, msg, None)

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> ReturnT:
        data = _object(body)
        content = data.get("content")
        return cls(_int(data, "code", FAIL_CODE), _str(data, "msg"),
                   data.get("data") if content is None else content)


@dataclass(slots=True)
class TriggerParam:
    job_id: int
    executor_handler: str = ""
    executor_params: str = ""
    executor_block_strategy: str = "SERIAL_EXECUTION"
    executor_timeout: int = 0
    log_id: int = 0
    log_date_time: int = 0
    glue_type: str = "BEAN"
    glue_source: str = ""
    glue_updatetime: int = 0
    broadcast_index: int = 0
    broadcast_total: int = 1
    # jobring: the run's logical (business) time and the start of its data interval, epoch ms
    # (XXL-JOB executors ignore these fields).
    logical_time: int | None = None
    data_interval_start: int | None = None
    # jobring: a workflow node's run carries its workflow run's context as the node starts
    # (absent for every other run; XXL-JOB executors ignore it, as they do unknown fields).
    workflow_context: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "jobId": self.job_id,
            "executorHandler": self.executor_handler,
            "executorParams": self.executor_params,
            "executorBlockStrategy": self.executor_block_strategy,
            "executorTimeout": self.executor_timeout,
            "logId": self.log_id,
            "logDateTime": self.log_date_time,
            "glueType": self.glue_type,
            "glueSource": self.glue_source,
            "glueUpdatetime": self.glue_updatetime,
            "broadcastIndex": self.broadcast_index,
            "broadcastTotal": self.broadcast_total,
        }
        if self.logical_time is not None:
            out["logicalTime"] = self.logical_time
            if self.data_interval_start is not None:
                out["dataIntervalStart"] = self.data_interval_start
        if self.workflow_context is not None:
            out[WORKFLOW_CONTEXT_FIELD] = self.workflow_context
        return out

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> TriggerParam:
        d = _object(body)
        return cls(
            job_id=_int(d, "jobId"),
            executor_handler=_str(d, "executorHandler", "") or "",
            executor_params=_str(d, "executorParams", "") or "",
            executor_block_strategy=_str(d, "executorBlockStrategy", "SERIAL_EXECUTION")
            or "SERIAL_EXECUTION",
            executor_timeout=_int(d, "executorTimeout"),
            log_id=_long(d, "logId"),
            # 3.x spells it in full; 2.x TriggerParam already does.
            log_date_time=_long(d, "logDateTime", _long(d, "logDateTim")),
            glue_type=_str(d, "glueType", "BEAN") or "BEAN",
            glue_source=_str(d, "glueSource", "") or "",
            glue_updatetime=_long(d, "glueUpdatetime"),
            broadcast_index=_int(d, "broadcastIndex"),
            broadcast_total=_int(d, "broadcastTotal", 1),
            logical_time=_optional_long(d, "logicalTime"),
            data_interval_start=_optional_long(d, "dataIntervalStart"),
            workflow_context=_optional_object(d, WORKFLOW_CONTEXT_FIELD),
        )


@dataclass(slots=True)
class HandleCallbackParam:
    log_id: int
    log_date_tim: int
    handle_code: int
    handle_msg: str | None = None
    # jobring: what a workflow node's handler added to the workflow context
    # (``ctx.workflow.set``); absent otherwise. XXL-JOB admins ignore the field.
    workflow_context: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "logId": self.log_id,
            "logDateTim": self.log_date_tim,
            "handleCode": self.handle_code,
        }
        if self.handle_msg is not None:
            out["handleMsg"] = self.handle_msg
        if self.workflow_context is not None:
            out[WORKFLOW_CONTEXT_FIELD] = self.workflow_context
        return out

    def to_dict_35(self) -> dict[str, Any]:
        """The 3.5 spelling (``logDateTime``), an item of ``{"callbackList": [...]}``."""
        out: dict[str, Any] = {
            "logId": self.log_id,
            "logDateTime": self.log_date_tim,
            "handleCode": self.handle_code,
        }
        if self.handle_msg is not None:
            out["handleMsg"] = self.handle_msg
        if self.workflow_context is not None:
            out[WORKFLOW_CONTEXT_FIELD] = self.workflow_context
        return out

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> HandleCallbackParam:
        d = _object(body)
        return cls(
            log_id=_long(d, "logId"),
            log_date_tim=_long(d, "logDateTim", _long(d, "logDateTime")),
            handle_code=_int(d, "handleCode"),
            handle_msg=_text(d.get("handleMsg")),
            workflow_context=_optional_object(d, WORKFLOW_CONTEXT_FIELD),
        )

    @staticmethod
    def encode_batch(batch: Sequence[HandleCallbackParam], *, v35: bool) -> bytes:
        """A callback body: 2.x-3.4 a bare array, 3.5 ``{"callbackList": [...]}``."""
        if v35:
            return orjson.dumps({"callbackList": [item.to_dict_35() for item in batch]})
        return orjson.dumps([item.to_dict() for item in batch])

    @classmethod
    def decode_batch(cls, body: bytes, max_items: int | None = None) -> list[HandleCallbackParam]:
        """The items of a callback body; TooManyItems (before any item is decoded) when
        there are more than ``max_items``."""
        return [cls.decode(item) for item in cls.batch_objects(body, max_items)]

    @staticmethod
    def batch_objects(body: bytes, max_items: int | None = None) -> list[dict[str, Any]]:
        """The JSON objects of a callback body, not decoded yet (a caller may decode them a
        part at a time); TooManyItems when there are more than ``max_items``."""
        try:
            data = orjson.loads(body) if body.strip() else []
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(str(exc)) from exc
        if isinstance(data, dict) and "callbackList" in data:  # 3.x wraps the batch
            data = data["callbackList"]
        if not isinstance(data, list):
            raise ProtocolError("callback body must be a JSON array of objects")
        if max_items is not None and len(data) > max_items:
            raise TooManyItems(len(data), max_items)
        if not all(isinstance(i, dict) for i in data):
            raise ProtocolError("callback body must be a JSON array of objects")
        return data


class TooManyItems(ProtocolError):
    """A callback batch with more items than an admin takes in one request."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"callback batch of {count} items refused: at most {limit} items per request "
                         "(send the rest in further requests)")
        self.count = count
        self.limit = limit


# jobring extension: the executor process's start (epoch ms), sent as a header with
# api/registry so the body stays XXL-JOB's; admins that do not know it ignore it.
STARTED_AT_HEADER = "X-Jobring-Started-At"


# jobring extension: the handler names a jobring executor has, as a field of the api/registry
# body (a header would not hold a thousand names). Every XXL-JOB admin that speaks JSON reads
# the body with Gson, which skips fields it does not know; a jobring admin routes a job only
# to the executors that declared its handler (or declared nothing: Java, pyxxl, older ones).
HANDLERS_FIELD = "jobringHandlers"
MAX_DECLARED_HANDLERS = 1_000
MAX_HANDLER_NAME = 255  # xxl_job_info.executor_handler: a longer name names no job


@dataclass(slots=True)
class RegistryParam:
    registry_group: str
    registry_key: str
    registry_value: str
    # The declared handler names (jobring executors); None: nothing declared.
    handlers: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "registryGroup": self.registry_group,
            "registryKey": self.registry_key,
            "registryValue": self.registry_value,
        }
        if self.handlers is not None:
            body[HANDLERS_FIELD] = list(self.handlers)
        return body

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> RegistryParam:
        d = _object(body)
        group, key, value = (
            _str(d, "registryGroup"),
            _str(d, "registryKey"),
            _str(d, "registryValue"),
        )
        if not group or not key or not value:
            raise ProtocolError("Illegal Argument.")
        return cls(group, key, value, _handlers(d.get(HANDLERS_FIELD)))


def _handlers(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) > MAX_DECLARED_HANDLERS
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_HANDLER_NAME for v in value)):
        raise ProtocolError(f"field {HANDLERS_FIELD!r} must be a list of at most {MAX_DECLARED_HANDLERS} "
                            f"handler names of 1 to {MAX_HANDLER_NAME} characters")
    return tuple(sorted(set(value)))


@dataclass(slots=True)
class IdleBeatParam:
    job_id: int

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> IdleBeatParam:
        return cls(_int(_object(body), "jobId"))

    def to_dict(self) -> dict[str, Any]:
        return {"jobId": self.job_id}


KillParam = IdleBeatParam


@dataclass(slots=True)
class LogParam:
    log_date_tim: int
    log_id: int
    from_line_num: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "logDateTim": self.log_date_tim,
            "logId": self.log_id,
            "fromLineNum": self.from_line_num,
        }

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> LogParam:
        d = _object(body)
        return cls(
            _long(d, "logDateTim", _long(d, "logDateTime")),
            _long(d, "logId"),
            _int(d, "fromLineNum", 1),
        )


@dataclass(slots=True)
class LogResult:
    from_line_num: int
    to_line_num: int
    log_content: str
    is_end: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "fromLineNum": self.from_line_num,
            "toLineNum": self.to_line_num,
            "logContent": self.log_content,
            "isEnd": self.is_end,
        }

    @classmethod
    def decode(cls, body: bytes | dict[str, Any]) -> LogResult:
        d = _object(body)
        return cls(
            _int(d, "fromLineNum"),
            _int(d, "toLineNum"),
            _str(d, "logContent", "") or "",
            bool(d.get("isEnd", False)),
        )
