import { api, ok, type Schemas } from "./client";

const path = (jobId: number) => ({ params: { path: { job_id: jobId } } });

export const getGlue = (jobId: number) => ok(api.GET("/jobs/{job_id}/glue", path(jobId)));
export const listGlueVersions = (jobId: number) => ok(api.GET("/jobs/{job_id}/glue/versions", path(jobId)));
export const saveGlue = (jobId: number, body: Schemas["GlueSave"]) =>
  ok(api.PUT("/jobs/{job_id}/glue", { ...path(jobId), body }));
export const restoreGlueVersion = (jobId: number, versionId: number) =>
  ok(api.POST("/jobs/{job_id}/glue/versions/{version_id}/restore", {
    params: { path: { job_id: jobId, version_id: versionId } },
  }));
