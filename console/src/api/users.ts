import { api, ok, type Schemas } from "./client";

const path = (userId: number) => ({ params: { path: { user_id: userId } } });

export const listUsers = (limit: number) => ok(api.GET("/users", { params: { query: { limit } } }));
export const createUser = (body: Schemas["UserCreate"]) => ok(api.POST("/users", { body }));
export const updateUser = (userId: number, body: Schemas["UserUpdate"]) =>
  ok(api.PATCH("/users/{user_id}", { ...path(userId), body }));
export const deleteUser = (userId: number) => ok(api.DELETE("/users/{user_id}", path(userId)));
/** Changes the signed-in user's own password; the user as it is then. */
export const changeOwnPassword = (body: Schemas["PasswordChange"]) => ok(api.POST("/users/me/password", { body }));
