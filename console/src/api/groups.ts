import { api, ok, type Schemas } from "./client";

const path = (groupId: number) => ({ params: { path: { group_id: groupId } } });

export const listGroups = (limit: number) => ok(api.GET("/groups", { params: { query: { limit } } }));
export const getGroup = (groupId: number) => ok(api.GET("/groups/{group_id}", path(groupId)));
export const createGroup = (body: Schemas["GroupIn"]) => ok(api.POST("/groups", { body }));
export const updateGroup = (groupId: number, body: Schemas["GroupIn"]) =>
  ok(api.PUT("/groups/{group_id}", { ...path(groupId), body }));
export const deleteGroup = (groupId: number) => ok(api.DELETE("/groups/{group_id}", path(groupId)));
export const getGroupToken = (groupId: number) => ok(api.GET("/groups/{group_id}/access-token", path(groupId)));
export const rotateGroupToken = (groupId: number) =>
  ok(api.POST("/groups/{group_id}/access-token/rotate", path(groupId)));
/** Takes an executor address out of routing (or puts it back); the group as it is then. */
export const setAddressDisabled = (groupId: number, address: string, disabled: boolean) => (disabled
  ? ok(api.POST("/groups/{group_id}/addresses/disable", { ...path(groupId), body: { address } }))
  : ok(api.POST("/groups/{group_id}/addresses/enable", { ...path(groupId), body: { address } })));
/** Sets the flow control of every job of the group (an empty body: none); the group. */
export const setGroupFlow = (groupId: number, body: Schemas["FlowIn"]) =>
  ok(api.PUT("/groups/{group_id}/flow", { ...path(groupId), body }));
