import { api, ok, type QueryOf } from "./client";

export type AuditQuery = QueryOf<"/audit">;

export const listAudit = (query: AuditQuery) => ok(api.GET("/audit", { params: { query } }));
