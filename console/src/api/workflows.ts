import { api, ok, type QueryOf, type Schemas } from "./client";

export type Workflow = Schemas["WorkflowOut"];
export type WorkflowBody = Schemas["WorkflowIn"];
export type WorkflowCheck = Schemas["WorkflowCheckOut"];
export type WorkflowRun = Schemas["WorkflowRunOut"];
export type WorkflowRunSummary = Schemas["WorkflowRunSummaryOut"];
export type NodeRun = Schemas["NodeRunOut"];
export type WorkflowQuery = QueryOf<"/workflows">;
export type WorkflowRunQuery = QueryOf<"/workflow-runs">;

const wf = (workflowId: number) => ({ params: { path: { workflow_id: workflowId } } });
const run = (runId: number) => ({ params: { path: { run_id: runId } } });
const node = (runId: number, key: string) => ({ params: { path: { run_id: runId, key } } });
/** A repair names the round the page read, so a repeated click repairs once. */
const round = (value: number | undefined) => ({ body: value === undefined ? null : { round: value } });

export const listWorkflows = (query: WorkflowQuery) => ok(api.GET("/workflows", { params: { query } }));
export const getWorkflow = (workflowId: number) => ok(api.GET("/workflows/{workflow_id}", wf(workflowId)));
export const createWorkflow = (body: WorkflowBody) => ok(api.POST("/workflows", { body }));
export const updateWorkflow = (workflowId: number, body: WorkflowBody) =>
  ok(api.PUT("/workflows/{workflow_id}", { ...wf(workflowId), body }));
/** The save's checks, storing nothing (with `workflowId`: as a new version of that workflow, as updateWorkflow would). */
export const validateWorkflow = (body: WorkflowBody, workflowId: number | null = null) =>
  ok(api.POST("/workflows/validate", { params: { query: workflowId === null ? {} : { workflow_id: workflowId } }, body }));
export const deleteWorkflow = (workflowId: number) => ok(api.DELETE("/workflows/{workflow_id}", wf(workflowId)));
export const triggerWorkflow = (workflowId: number, params: Record<string, unknown>, force = false) =>
  ok(api.POST("/workflows/{workflow_id}/trigger", { ...wf(workflowId), body: { params, force } }));

export const listWorkflowRuns = (query: WorkflowRunQuery) => ok(api.GET("/workflow-runs", { params: { query } }));
export const getWorkflowRun = (runId: number) => ok(api.GET("/workflow-runs/{run_id}", run(runId)));
export const stopWorkflowRun = (runId: number, at?: number) =>
  ok(api.POST("/workflow-runs/{run_id}/stop", { ...run(runId), ...round(at) }));
export const retryWorkflowRun = (runId: number, at?: number) =>
  ok(api.POST("/workflow-runs/{run_id}/retry", { ...run(runId), ...round(at) }));
export const markNodeSucceeded = (runId: number, key: string, at?: number) =>
  ok(api.POST("/workflow-runs/{run_id}/nodes/{key}/mark-succeeded", { ...node(runId, key), ...round(at) }));
export const rerunFromNode = (runId: number, key: string, at?: number) =>
  ok(api.POST("/workflow-runs/{run_id}/nodes/{key}/rerun", { ...node(runId, key), ...round(at) }));

export type WorkflowSchedule = Schemas["WorkflowScheduleOut"];
export const getWorkflowSchedule = (workflowId: number) => ok(api.GET("/workflows/{workflow_id}/schedule", wf(workflowId)));
export const putWorkflowSchedule = (workflowId: number, body: Schemas["WorkflowScheduleIn"]) =>
  ok(api.PUT("/workflows/{workflow_id}/schedule", { ...wf(workflowId), body }));
