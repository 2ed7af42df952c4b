import { api, ok, type Schemas, type User } from "./client";

export const login = (body: Schemas["LoginIn"]) => ok(api.POST("/auth/login", { body }));

/** Who the session cookies belong to: the user, or null with the refusal's status (401: ended). */
export async function currentUser(): Promise<{ user: User | null; status: number }> {
  const answer = await api.GET("/auth/me");
  return { user: answer.response.ok && answer.data ? answer.data.user : null, status: answer.response.status };
}

export async function logout(): Promise<void> {
  await api.POST("/auth/logout");
}
