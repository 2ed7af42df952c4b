// Objects as the API answers them (the schema's types), for the component tests.
import type { Group, Job, Page, Run, Schemas, Token, User } from "../../src/api/client";

type PageOut<T> = Page<T> & { offset: number; limit: number };

export function page<T>(items: T[], more: Partial<PageOut<T>> = {}): PageOut<T> {
  return { items, total: items.length, total_exact: true, next_cursor: null, offset: 0, limit: 20, ...more };
}

export function job(over: Partial<Job> = {}): Job {
  return {
    id: 1, job_group: 1, job_desc: "nightly report", author: "ops", alarm_email: null, alarm_on: "failure",
    alarm_recovery: false, alarm_targets: [], child_job_ids: [], deadline_minutes: null, declared_by_executor: false, managed_by: "console",
    executor_block_strategy: "SERIAL_EXECUTION", executor_fail_retry_count: 0, executor_fail_retry_interval_s: 0,
    executor_handler: "report", executor_param: null, executor_route_strategy: "FIRST", executor_timeout: 0,
    glue_remark: null, glue_type: "BEAN", glue_updatetime: null, misfire_strategy: "DO_NOTHING", retry_backoff: "fixed",
    retry_backoff_max_s: 0, schedule_conf: "0 0 2 * * ?", schedule_timezone: null, schedule_type: "CRON",
    trigger_last_time: 0, trigger_next_time: 0, trigger_status: 0, add_time: null, update_time: null,
    shard_count: 0, failure_tolerance: null, ...over,
  };
}

export function run(over: Partial<Run> = {}): Run {
  return {
    id: 10, job_id: 1, job_group: 1, state: "success", alarm_status: 0, attempt: 1, dispatch_time: null, duration_ms: 1200,
    executor_address: "http://127.0.0.1:9999", executor_fail_retry_count: 0, executor_handler: "report", executor_param: null,
    executor_sharding_param: null, handle_code: 200, handle_msg: null, retry_of: null, handle_time: "2026-01-01T00:00:01Z", planned_time: null,
    trigger_code: 200, trigger_msg: null, trigger_time: "2026-01-01T00:00:00Z", trigger_type: "manual", ...over,
  };
}

export function group(over: Partial<Group> = {}): Group {
  return {
    id: 1, app_name: "reports", title: "Reports", address_type: 0, addresses: [], disabled_addresses: [],
    has_access_token: false, online: [], update_time: null, ...over,
  };
}

export function user(over: Partial<User> = {}): User {
  return {
    id: 1, username: "admin", role: "admin", group_ids: [], glue_permission: true, must_change_password: false,
    add_time: null, ...over,
  };
}

export function token(over: Partial<Token> = {}): Token {
  return { id: 1, user_id: 1, name: "ci", add_time: null, last_used_time: null, expires_at: null, revoked: false, ...over };
}

export function auditEntry(over: Partial<Schemas["AuditOut"]> = {}): Schemas["AuditOut"] {
  return {
    id: 1, at: "2026-01-01T00:00:00Z", actor: "admin", actor_id: 1, actor_kind: "session", action: "job.update",
    target_type: "job", target_id: "1", group_id: 1, outcome: "success", source: "127.0.0.1", details: null, token_id: null, ...over,
  };
}

export function delayed(over: Partial<Schemas["DelayedFireOut"]> = {}): Schemas["DelayedFireOut"] {
  return {
    id: 1, job_id: 1, job_group: 1, fire_at: Date.UTC(2030, 0, 1), fire_at_iso: "2030-01-01T00:00:00Z", executor_param: null,
    addresses: null, created_by: "admin", created_at: 0, state: "scheduled", ...over,
  };
}
