"""The executor endpoints (ASGI app) against a fake engine: routing, token, errors, answers."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.executor.http.app import MSG_JOB_BUSY, MSG_NOT_STARTED, ExecutorEndpoints
from jobring.executor.http.decode import decode_trigger
from jobring.executor.runlog import RunLog
from jobring.protocol.models import ReturnT, TriggerParam

TOKEN = "s3cret"


class FakeService:
    def __init__(self) -> None:
        self.runs: list[TriggerParam] = []
        self.killed: list[int] = []
        self.busy: set[int] = set()

    async def run(self, param: TriggerParam) -> ReturnT:
        self.runs.append(param)
        if param.executor_handler == "nope":
            return ReturnT.fail("job handler [nope] not found.")
        return ReturnT.success()

    def is_idle(self, job_id: int) -> bool:
        return job_id not in self.busy

    async def kill(self, job_id: int) -> ReturnT:
        self.killed.append(job_id)
        return ReturnT(200, "job thread already killed.")

    def received_of(self, runs: list[tuple[int, int]]) -> list[int]:
        return [log_id for log_id, _ in runs if log_id % 2 == 0]


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def runlog(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path)


@pytest.fixture
def endpoints(service: FakeService, runlog: RunLog) -> ExecutorEndpoints:
    app = ExecutorEndpoints(TOKEN)
    app.bind(service, runlog.read)
    return app


def client_for(app: object, base: str = "http://executor") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base)  # type: ignore[arg-type]


async def post(app: object, path: str, body: bytes | dict[str, object] | None = None,
               token: str | None = TOKEN, method: str = "POST") -> httpx.Response:
    headers = {"XXL-JOB-ACCESS-TOKEN": token} if token is not None else {}
    content = body if isinstance(body, bytes) else (orjson.dumps(body) if body is not None else b"")
    async with client_for(app) as client:
        return await client.request(method, path, content=content, headers=headers)


async def test_beat_answers_code_200_with_null_fields_omitted(endpoints: ExecutorEndpoints) -> None:
    response = await post(endpoints, "/beat")
    assert response.status_code == 200
    assert response.content == b'{"code":200}'
    assert (await post(endpoints, "/beat", {})).content == b'{"code":200}'


@pytest.mark.parametrize("token", ["wrong", None, ""])
async def test_wrong_or_missing_token_is_refused(endpoints: ExecutorEndpoints, token: str | None,
                                                 service: FakeService) -> None:
    for path in ("/beat", "/run", "/nope"):
        response = await post(endpoints, path, {"jobId": 1, "executorHandler": "x"}, token=token)
        assert response.status_code == 200
        assert response.content == b'{"code":500,"msg":"The access token is wrong."}'
    assert service.runs == []


async def test_non_post_is_refused_before_the_token_check(endpoints: ExecutorEndpoints) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = await post(endpoints, "/beat", method=method, token=None)
        assert response.content == b'{"code":500,"msg":"invalid request, HttpMethod not support."}'


async def test_unknown_path_names_the_uri(endpoints: ExecutorEndpoints) -> None:
    response = await post(endpoints, "/nope", {})
    assert response.content == b'{"code":500,"msg":"invalid request, uri-mapping(/nope) not found."}'


async def test_malformed_json_is_a_request_error(endpoints: ExecutorEndpoints, service: FakeService) -> None:
    for path in ("/run", "/idleBeat", "/kill", "/log"):
        answer = orjson.loads((await post(endpoints, path, b"{not json")).content)
        assert answer["code"] == 500
        assert answer["msg"].startswith("request error:")
    answer = orjson.loads((await post(endpoints, "/run", b'{"jobId":"abc"}')).content)
    assert answer == {"code": 500, "msg": "request error:field 'jobId' must be an integer"}
    assert service.runs == []


async def test_run_decodes_the_trigger_and_returns_the_engine_answer(
    endpoints: ExecutorEndpoints, service: FakeService
) -> None:
    body = {"jobId": 7, "executorHandler": "demo", "executorParams": "p=1", "logId": 42,
            "logDateTime": 1795350973184, "broadcastIndex": 2, "broadcastTotal": 3, "extra": "ignored"}
    assert (await post(endpoints, "/run", body)).content == b'{"code":200}'
    param = service.runs[-1]
    assert (param.job_id, param.executor_handler, param.executor_params) == (7, "demo", "p=1")
    assert param.log_id == 42
    assert (param.broadcast_index, param.broadcast_total, param.log_date_time) == (2, 3, 1795350973184)
    answer = (await post(endpoints, "/run", {"jobId": 8, "executorHandler": "nope"})).content
    assert answer == b'{"code":500,"msg":"job handler [nope] not found."}'


async def test_trigger_is_an_alias_of_run(endpoints: ExecutorEndpoints, service: FakeService) -> None:
    answer = await post(endpoints, "/trigger", {"jobId": 3, "executorHandler": "demo"})
    assert answer.content == b'{"code":200}'
    assert service.runs[-1].job_id == 3


async def test_idle_beat_reflects_the_engine(endpoints: ExecutorEndpoints, service: FakeService) -> None:
    assert (await post(endpoints, "/idleBeat", {"jobId": 1})).content == b'{"code":200}'
    service.busy.add(1)
    answer = orjson.loads((await post(endpoints, "/idleBeat", {"jobId": 1})).content)
    assert answer == {"code": 500, "msg": MSG_JOB_BUSY}


async def test_kill_passes_the_job_id(endpoints: ExecutorEndpoints, service: FakeService) -> None:
    answer = (await post(endpoints, "/kill", {"jobId": 12345})).content
    assert answer == b'{"code":200,"msg":"job thread already killed."}'
    assert service.killed == [12345]


async def test_log_reads_lines_from_the_run_log(endpoints: ExecutorEndpoints, runlog: RunLog) -> None:
    for n in range(1, 5):
        runlog.append(1795350973184, 1001, f"line {n}")
    answer = orjson.loads((await post(endpoints, "/log", {"logDateTim": 1795350973184, "logId": 1001,
                                                          "fromLineNum": 3})).content)
    # XXL-JOB 3.3+ clients read "data", older ones "content": both carry the page.
    page = {"fromLineNum": 3, "toLineNum": 4, "logContent": "line 3\nline 4\n", "isEnd": False}
    assert answer == {"code": 200, "content": page, "data": page}
    missing = orjson.loads((await post(endpoints, "/log", {"logDateTim": 1795350973184, "logId": 999999,
                                                           "fromLineNum": 1})).content)
    none = {"fromLineNum": 1, "toLineNum": 0, "logContent": "readLog fail, logFile not exists", "isEnd": True}
    assert missing == {"code": 200, "content": none, "data": none}


async def test_received_says_which_runs_were_accepted(endpoints: ExecutorEndpoints) -> None:
    answer = orjson.loads((await post(endpoints, "/received", {"runs": [[1, 5], [2, 5], [4, 0]]})).content)
    assert answer["code"] == 200 and answer["content"] == {"received": [2, 4]}
    for bad in ({"runs": [[1]]}, {"runs": [[-1, 5]]}, {"runs": "x"}, [1, 2], {"runs": [[True, 5]]}):
        refused = orjson.loads((await post(endpoints, "/received", bad)).content)  # type: ignore[arg-type]
        assert refused["code"] == 500 and refused["msg"].startswith("request error:"), bad
    wrong = await post(endpoints, "/received", {"runs": []}, token="wrong")
    assert orjson.loads(wrong.content)["code"] == 500


async def test_log_with_ids_out_of_range_is_a_request_error(endpoints: ExecutorEndpoints) -> None:
    answer = orjson.loads((await post(endpoints, "/log", {"logDateTim": 1, "logId": -5})).content)
    assert answer["code"] == 500 and answer["msg"].startswith("request error:")


async def test_not_started_executor_answers_clearly() -> None:
    app = ExecutorEndpoints(TOKEN)
    assert (await post(app, "/beat")).content == b'{"code":200}'
    answer = orjson.loads((await post(app, "/run", {"jobId": 1})).content)
    assert answer == {"code": 500, "msg": MSG_NOT_STARTED}


async def test_without_token_configured_any_header_is_accepted(service: FakeService, runlog: RunLog) -> None:
    app = ExecutorEndpoints(None)
    app.bind(service, runlog.read)
    for token in (None, "x"):
        answer = await post(app, "/run", {"jobId": 1, "executorHandler": "a"}, token=token)
        assert answer.content == b'{"code":200}'


async def test_mounted_under_a_starlette_app_routes_relative_to_the_mount(
    endpoints: ExecutorEndpoints, service: FakeService
) -> None:
    host = Starlette(routes=[Mount("/xxl", app=endpoints)])
    assert (await post(host, "/xxl/run", {"jobId": 5, "executorHandler": "demo"})).content == b'{"code":200}'
    assert service.runs[-1].job_id == 5
    unknown = (await post(host, "/xxl/other", {})).content
    assert unknown == b'{"code":500,"msg":"invalid request, uri-mapping(/other) not found."}'


async def test_oversized_chunked_body_is_refused(endpoints: ExecutorEndpoints, service: FakeService) -> None:
    chunk = b"x" * (1 << 20)

    async def body():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield chunk

    async with client_for(endpoints) as client:
        response = await client.post("/run", content=body(), headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
    answer = orjson.loads(response.content)
    assert answer["code"] == 500 and "larger than" in answer["msg"]
    assert service.runs == []


@pytest.mark.parametrize(
    "body",
    [
        {"jobId": 1, "executorHandler": "h", "executorParams": "p", "executorBlockStrategy": "COVER_EARLY",
         "executorTimeout": 5, "logId": 9, "logDateTime": 1795350973184, "glueType": "BEAN", "glueSource": "",
         "glueUpdatetime": 1795350973184, "broadcastIndex": 1, "broadcastTotal": 2},
        {"jobId": 1, "executorHandler": "h"},
        {"jobId": 1, "executorHandler": "h", "executorParams": "p", "executorBlockStrategy": "COVER_EARLY",
         "executorTimeout": 5, "logId": 9, "logDateTime": 1795350973184, "glueType": "BEAN", "glueSource": "",
         "glueUpdatetime": 0, "broadcastIndex": 0, "broadcastTotal": 1, "logicalTime": 1772330400000,
         "dataIntervalStart": 1772244000000},
        {"jobId": 1, "executorHandler": "h", "executorParams": "p", "executorBlockStrategy": "COVER_EARLY",
         "executorTimeout": 5, "logId": 9, "logDateTime": 1795350973184, "glueType": "BEAN", "glueSource": "",
         "glueUpdatetime": 0, "broadcastIndex": 0, "broadcastTotal": 1, "logicalTime": "1772330400000"},
        {"jobId": "12", "executorHandler": "h", "executorParams": None, "logId": 3, "extra": [1]},
        {"jobId": 1, "executorHandler": "h", "executorParams": "",
         "executorBlockStrategy": "SERIAL_EXECUTION", "executorTimeout": 0, "logId": 9,
         "logDateTime": 1, "glueType": "BEAN", "glueSource": None,
         "glueUpdatetime": 1, "broadcastIndex": 0, "broadcastTotal": 1},
    ],
)
def test_fast_trigger_decoding_equals_the_model_decoder(body: dict[str, object]) -> None:
    raw = orjson.dumps(body)
    assert decode_trigger(raw) == TriggerParam.decode(raw)


@pytest.mark.parametrize("raw", [b"{not json", b"[1]", b'{"jobId": true}', b'{"jobId": 1, "logId": "x"}'])
def test_fast_trigger_decoding_refuses_what_the_model_refuses(raw: bytes) -> None:
    with pytest.raises(ValueError) as ours:
        decode_trigger(raw)
    with pytest.raises(ValueError) as theirs:
        TriggerParam.decode(raw)
    assert str(ours.value) == str(theirs.value)
