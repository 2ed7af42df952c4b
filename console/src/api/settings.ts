import { api, ok } from "./client";

export const getSettings = () => ok(api.GET("/settings"));
/** What every signed-in user's console needs: GLUE on or off, the admin's zone. */
export const getConsoleSettings = () => ok(api.GET("/settings/console"));
export const getAccessToken = () => ok(api.GET("/settings/access-token"));
