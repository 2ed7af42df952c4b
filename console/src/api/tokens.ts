import { api, ok, type Schemas } from "./client";

/** The signed-in user's API tokens. */
export const listTokens = () => ok(api.GET("/tokens"));
export const createToken = (body: Schemas["TokenCreate"]) => ok(api.POST("/tokens", { body }));
export const revokeToken = (tokenId: number) =>
  ok(api.DELETE("/tokens/{token_id}", { params: { path: { token_id: tokenId } } }));
