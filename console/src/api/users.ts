import { api, ok, type QueryOf, type Schemas } from "./client";

const path = (userId: number) => ({ params: { path: { user_id: userId } } });

export type UserQuery = QueryOf<"/users">;
export const listUsers = (query: UserQuery) => ok(api.GET("/users", { params: { query } }));
export const createUser = (body: Schemas["UserCreate"]) => ok(api.POST("/users", { body }));
export const updateUser = (userId: number, body: Schemas["UserUpdate"]) =>
  ok(api.PATCH("/users/{user_id}", { ...path(userId), body }));
export const deleteUser = (userId: number) => ok(api.DELETE("/users/{user_id}", path(userId)));
/** Changes the signed-in user's own password; the user as it is then. */
export const changeOwnPassword = (body: Schemas["PasswordChange"]) => ok(api.POST("/users/me/password", { body }));
