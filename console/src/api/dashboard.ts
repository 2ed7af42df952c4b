import { api, ok, type QueryOf } from "./client";

export type DashboardQuery = QueryOf<"/dashboard">;

export const getDashboard = (query: DashboardQuery) => ok(api.GET("/dashboard", { params: { query } }));
