import { api, ok, type Job, type QueryOf, type Schemas } from "./client";

export type JobQuery = QueryOf<"/jobs">;
const path = (jobId: number) => ({ params: { path: { job_id: jobId } } });

export const listJobs = (query: JobQuery) => ok(api.GET("/jobs", { params: { query } }));
export const getJob = (jobId: number) => ok(api.GET("/jobs/{job_id}", path(jobId)));
export const createJob = (body: Schemas["JobCreate"]) => ok(api.POST("/jobs", { body }));
export const updateJob = (jobId: number, body: Schemas["JobUpdate"]) =>
  ok(api.PATCH("/jobs/{job_id}", { ...path(jobId), body }));
export const deleteJob = (jobId: number) => ok(api.DELETE("/jobs/{job_id}", path(jobId)));
export const copyJob = (jobId: number) => ok(api.POST("/jobs/{job_id}/copy", path(jobId)));

/** Starts a stopped job or stops a started one (with the reason of the pause, if given); the job as it is then. */
export function setJobStarted(jobId: number, started: boolean, reason?: string): Promise<Job> {
  return started
    ? ok(api.POST("/jobs/{job_id}/start", path(jobId)))
    : ok(api.POST("/jobs/{job_id}/stop", { ...path(jobId), body: reason ? { reason } : null }));
}

export const triggerJob = (jobId: number, body: Schemas["TriggerIn"]) =>
  ok(api.POST("/jobs/{job_id}/trigger", { ...path(jobId), body }));
export const triggerJobAt = (jobId: number, body: Schemas["TriggerAtIn"]) =>
  ok(api.POST("/jobs/{job_id}/trigger-at", { ...path(jobId), body }));

/** The next fire times of a schedule (for the job editor's preview). */
export const previewSchedule = (body: Schemas["TimedPreviewIn"]) => ok(api.POST("/schedules/preview", { body }));

export type DelayedQuery = QueryOf<"/delayed-runs">;
/** Pending delayed runs ("Run at") of the user's groups, of one group or of one job; soonest first. */
export const listDelayed = (query: DelayedQuery) => ok(api.GET("/delayed-runs", { params: { query } }));
export const cancelDelayed = (jobId: number, fireId: number) =>
  ok(api.DELETE("/jobs/{job_id}/delayed/{fire_id}", { params: { path: { job_id: jobId, fire_id: fireId } } }));

export type Backfill = Schemas["BackfillOut"];
/** Backfill a job's past instants; with dry_run only list them. */
export const backfillJob = (jobId: number, body: Schemas["BackfillIn"]) =>
  ok(api.POST("/jobs/{job_id}/backfill", { ...path(jobId), body }));
export const listBackfills = (jobId: number) => ok(api.GET("/jobs/{job_id}/backfills", path(jobId)));
export const cancelBackfill = (backfillId: number) =>
  ok(api.DELETE("/backfills/{backfill_id}", { params: { path: { backfill_id: backfillId } } }));
