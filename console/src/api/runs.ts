import { api, ok, type QueryOf, type Schemas } from "./client";

export type RunQuery = QueryOf<"/runs">;
const path = (runId: number) => ({ params: { path: { run_id: runId } } });

export const listRuns = (query: RunQuery) => ok(api.GET("/runs", { params: { query } }));
export const getRun = (runId: number) => ok(api.GET("/runs/{run_id}", path(runId)));
export const getRunLog = (runId: number, fromLine: number) =>
  ok(api.GET("/runs/{run_id}/log", { params: { path: { run_id: runId }, query: { from_line: fromLine } } }));
export const getRunAttempts = (runId: number) => ok(api.GET("/runs/{run_id}/attempts", path(runId)));
export const cancelRun = (runId: number) => ok(api.POST("/runs/{run_id}/cancel", path(runId)));
export const killRun = (runId: number) => ok(api.POST("/runs/{run_id}/kill", path(runId)));
export const clearRuns = (body: Schemas["ClearIn"]) => ok(api.POST("/runs/clear", { body }));
export type SubTaskQuery = QueryOf<"/runs/{run_id}/subtasks">;
export type SubTaskPage = Schemas["SubTaskPageOut"];
export type SubTask = Schemas["SubTaskOut"];
export type SubTaskProgress = Schemas["ProgressOut"];
export const getRunSubtasks = (runId: number, query: SubTaskQuery) =>
  ok(api.GET("/runs/{run_id}/subtasks", { params: { path: { run_id: runId }, query } }));
export const retryFailedSubtasks = (runId: number) => ok(api.POST("/runs/{run_id}/retry-failed", path(runId)));
