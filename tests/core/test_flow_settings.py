"""Flow settings of jobs and groups: validation, the stored form, and what they make of a run
(scopes, priority, the limits and rates of a set of scopes)."""

from __future__ import annotations

import pytest

from jobring.core.flow import ConcurrencyLimit, FlowError, OnLimit, RateLimit, Scope
from jobring.core.flow.settings import FlowSettings, parse_flow, run_flow, scope_limits, template_variables


def test_stored_form_round_trips_and_keeps_only_what_is_set() -> None:
    settings = FlowSettings(max_concurrent_runs=30, concurrency_key="{{params.tenant}}", key_limit=2,
                            on_limit=OnLimit.SKIP, rate_limit=10, rate_period="minute", priority=3)
    text = settings.to_json()
    assert text == ('{"concurrency_key":"{{params.tenant}}","key_limit":2,"max_concurrent_runs":30,'
                    '"on_limit":"skip","priority":3,"rate_limit":10,"rate_period":"minute"}')
    assert parse_flow(text) == settings
    assert FlowSettings().to_json() is None and FlowSettings(on_limit=OnLimit.SKIP).empty is False
    assert parse_flow(None) is None and parse_flow('{"on_limit":"queue"}') is None


@pytest.mark.parametrize(("fields", "field"), [
    ({"max_concurrent_runs": 0}, "max_concurrent_runs"),
    ({"max_concurrent_runs": True}, "max_concurrent_runs"),
    ({"key_limit": 2}, "key_limit"),
    ({"concurrency_key": "  "}, "concurrency_key"),
    ({"concurrency_key": "{{ params. }}"}, "concurrency_key"),
    ({"rate_limit": 0}, "rate_limit"),
    ({"rate_limit": 1, "rate_period": "day"}, "rate_period"),
    ({"priority": 4}, "priority"),
    ({"on_limit": "drop"}, "on_limit"),
    ({"limit": 3}, "limit"),
])
def test_invalid_settings_name_their_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(FlowError) as caught:
        FlowSettings.from_dict(fields)
    assert caught.value.field == field


def test_template_variables_read_json_or_pairs() -> None:
    assert template_variables('{"tenant": "acme", "n": 2}', 7, 2)["params"] == {"tenant": "acme", "n": 2}
    assert template_variables("tenant=acme&day=1", 7, 2)["params"] == {"tenant": "acme", "day": "1"}
    assert template_variables(None, 7, 2) == {"params": {}, "param": "", "job_id": 7, "group_id": 2}


def test_run_scopes_priority_and_a_missing_key() -> None:
    job = FlowSettings(concurrency_key="{{params.tenant}}", priority=1)
    group = FlowSettings(max_concurrent_runs=30, concurrency_key="{{ params.region | default('eu') }}",
                         priority=3)
    flow = run_flow(7, 2, job, group, "tenant=acme")
    assert [str(s) for s in flow.scopes] == ["job:7", "group:2", "key:job:7/acme", "key:group:2/eu"]
    assert flow.priority == 1  # the job's priority wins over its group's
    assert run_flow(7, 2, None, None, "").priority == 2
    with pytest.raises(FlowError) as caught:
        run_flow(7, 2, job, None, "other=1")
    assert caught.value.field == "concurrency_key"


def test_limits_and_rates_of_scopes_come_from_current_settings() -> None:
    job = FlowSettings(max_concurrent_runs=5, concurrency_key="{{params.tenant}}", key_limit=1, rate_limit=2)
    group = FlowSettings(max_concurrent_runs=30, on_limit=OnLimit.SKIP, rate_limit=100, rate_period="minute")
    scopes = [Scope.parse(t) for t in ("job:7", "group:2", "key:job:7/acme", "job:8")]
    limits, rates = scope_limits(scopes, {7: job, 8: None}, group)
    assert limits == {Scope.parse("job:7"): ConcurrencyLimit(5),
                      Scope.parse("key:job:7/acme"): ConcurrencyLimit(1),
                      Scope.parse("group:2"): ConcurrencyLimit(30, OnLimit.SKIP)}
    # The job has a key: its rate counts per key; the group has none: its rate counts for the group.
    assert rates == {Scope.parse("key:job:7/acme"): RateLimit(2, 1_000),
                     Scope.parse("group:2"): RateLimit(100, 60_000)}
