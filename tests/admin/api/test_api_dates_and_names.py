"""Issue #19 item 8 through the API in process: dashboard dates over the whole date range
answer 200 or 422 naming the field (never 500), in zones either side of UTC; name-like fields
refuse every line break and control character; hidden ids answer as missing ones."""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobring.admin.api.management.dashboard import FIRST_CHART_DAY, LAST_CHART_DAY, MAX_CHART_DAYS, _range
from jobring.admin.api.management.errors import ApiError
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from tests.admin.api_harness import api_env

EDGE_DAYS = [date(1, 1, 1), date(1, 1, 7), date(1969, 12, 31), FIRST_CHART_DAY, date(1970, 1, 2),
             date(2026, 6, 15), date(9999, 12, 24), LAST_CHART_DAY, date(9999, 12, 31), None]


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "Etc/GMT+12"])
async def test_dashboard_dates_at_every_edge_answer_200_or_422_naming_the_field(
    sqlite_store: Store, zone: str
) -> None:
    settings = AdminSettings(timezone=zone)
    async with api_env(sqlite_store, settings=settings) as env, env.client("admin") as http:
        for from_day, to_day, days in itertools.product(EDGE_DAYS, EDGE_DAYS, (1, 7, MAX_CHART_DAYS)):
            params = {"days": days, **({"from_day": from_day.isoformat()} if from_day else {}),
                      **({"to_day": to_day.isoformat()} if to_day else {})}
            answer = await http.get("/dashboard", params=params)
            inside = all(d is None or FIRST_CHART_DAY <= d <= LAST_CHART_DAY for d in (from_day, to_day))
            if answer.status_code == 200:
                assert inside, params
                chart = answer.json()["chart"]
                assert 1 <= len(chart) <= MAX_CHART_DAYS
                assert FIRST_CHART_DAY.isoformat() <= chart[0]["day"]
                assert chart[-1]["day"] <= LAST_CHART_DAY.isoformat()
            else:
                assert answer.status_code == 422, (params, answer.text)
                field = answer.json()["field"]
                assert field in ("from_day", "to_day"), answer.text
                if not inside:
                    day = from_day if field == "from_day" else to_day
                    assert day is not None and not FIRST_CHART_DAY <= day <= LAST_CHART_DAY, answer.text


CHART_DAYS = st.dates(FIRST_CHART_DAY, LAST_CHART_DAY) | st.none()


@given(CHART_DAYS, CHART_DAYS, st.integers(1, MAX_CHART_DAYS))
def test_a_chart_range_stays_within_the_chart_days_or_is_refused(
    from_day: date | None, to_day: date | None, days: int
) -> None:
    today = datetime(2026, 6, 15)
    try:
        first, last = _range(today, days, from_day, to_day)
    except ApiError as exc:
        assert exc.status == 422 and exc.field == "from_day"
        return
    assert datetime.combine(FIRST_CHART_DAY, datetime.min.time()) <= first <= last
    assert last <= datetime.combine(LAST_CHART_DAY, datetime.min.time())
    assert last - first < timedelta(days=MAX_CHART_DAYS)


BREAKERS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\t",
            "\x00", "\x7f"]
BREAKER_IDS = [f"U+{ord(b[0]):04X}{'+' if len(b) > 1 else ''}" for b in BREAKERS]


@pytest.mark.parametrize("brk", BREAKERS, ids=BREAKER_IDS)
async def test_name_like_fields_refuse_line_breaks_anywhere(sqlite_store: Store, brk: str) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a)
        for where in ("{}x", "x{}", "a{}b"):
            value = where.format(brk)
            cases = [
                ("POST", "/users", {"username": value.replace("x", "bob"), "password": "long enough pw"},
                 "username"),
                ("PATCH", f"/users/{env.user_ids['viewer']}", {"username": value.replace("x", "bob")},
                 "username"),
                ("POST", "/groups", {"app_name": value.replace("x", "app"), "title": "t"}, "app_name"),
                ("POST", "/groups", {"app_name": "app-new", "title": value}, "title"),
                ("PUT", f"/groups/{env.group_b}", {"app_name": "app-b", "title": value}, "title"),
                ("POST", "/tokens", {"name": value}, "name"),
                ("PATCH", f"/jobs/{job}", {"job_desc": value}, "job_desc"),
                ("PATCH", f"/jobs/{job}", {"author": value}, "author"),
                ("PATCH", f"/jobs/{job}", {"executor_handler": value}, "executor_handler"),
                ("PATCH", f"/jobs/{job}", {"alarm_email": value.replace("x", "ops@example.com")},
                 "alarm_email"),
                ("PATCH", f"/jobs/{job}",
                 {"schedule_type": "CRON", "schedule_conf": value.replace("x", "0 * * * * ?")},
                 "schedule_conf"),
                ("PATCH", f"/jobs/{job}", {"schedule_timezone": value.replace("x", "UTC")},
                 "schedule_timezone"),
                ("POST", f"/jobs/{job}/trigger",
                 {"addresses": [value.replace("x", env.double.addresses[0])]}, "addresses.0"),
            ]
            for method, path, body, field in cases:
                answer = await http.request(method, path, json=body)
                assert (answer.status_code, answer.json()["field"]) == (422, field), (path, body, answer.text)
        # Multi-line fields keep their line breaks.
        if brk in ("\n", "\r\n"):
            kept = await http.patch(f"/jobs/{job}", json={"executor_param": f"a{brk}b"})
            assert kept.status_code == 200 and kept.json()["executor_param"] == f"a{brk}b"
