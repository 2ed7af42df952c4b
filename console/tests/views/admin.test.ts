// @vitest-environment happy-dom
// Component tests of administration: users, groups, settings (the API modules mocked).
import { flushPromises } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../src/api/client";
import { createGroup, getGroupToken, listGroups, rotateGroupToken, setAddressDisabled, updateGroup } from "../../src/api/groups";
import { getAccessToken, getSettings } from "../../src/api/settings";
import { createUser, deleteUser, listUsers, updateUser } from "../../src/api/users";
import GroupsView from "../../src/views/GroupsView.vue";
import SettingsView from "../../src/views/SettingsView.vue";
import UsersView from "../../src/views/UsersView.vue";
import { group, page, user } from "./fixtures";
import { clickAndConfirm, fill, mountView, toastTexts } from "./harness";

vi.mock("../../src/api/groups");
vi.mock("../../src/api/settings");
vi.mock("../../src/api/users");

describe("UsersView", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group({ id: 3, title: "Billing" })]));
    vi.mocked(listUsers).mockResolvedValue(page([user(), user({ id: 2, username: "bob", role: "operator", group_ids: [3], glue_permission: false })]));
  });

  it("lists the users with their groups", async () => {
    const { wrapper } = await mountView(UsersView, { path: "/users" });
    expect(listUsers).toHaveBeenCalledWith({ username: undefined, role: undefined, offset: 0, limit: 20 });
    expect(wrapper.find("tr[data-user=bob]").text()).toContain("Billing");
    await wrapper.find("input[name=search_username]").setValue("bo");
    await wrapper.find("select[name=search_role]").setValue("operator");
    await wrapper.find("form[role=search]").trigger("submit");
    await flushPromises();
    expect(listUsers).toHaveBeenLastCalledWith({ username: "bo", role: "operator", offset: 0, limit: 20 });
    // nobody deletes themselves
    expect(wrapper.find("tr[data-user=admin] .danger-text").exists()).toBe(false);
  });

  it("creates a user who must change the password", async () => {
    vi.mocked(createUser).mockResolvedValue(user({ id: 3, username: "carol" }));
    const { wrapper } = await mountView(UsersView, { path: "/users" });
    await wrapper.find("[data-testid=new-user]").trigger("click");
    await fill(wrapper, { username: "carol", password: "a long enough secret" });
    await wrapper.find("#user-form").trigger("submit");
    await flushPromises();
    expect(createUser).toHaveBeenCalledWith({
      username: "carol", password: "a long enough secret", role: "operator", group_ids: [], glue_permission: false,
      must_change_password: true,
    });
    expect(wrapper.find("#user-form").exists()).toBe(false);
    expect(listUsers).toHaveBeenCalledTimes(2);
  });

  it("edits a user without touching the password when none is typed", async () => {
    vi.mocked(updateUser).mockResolvedValue(user({ id: 2, username: "bob", role: "viewer" }));
    const { wrapper } = await mountView(UsersView, { path: "/users" });
    await wrapper.find("tr[data-user=bob] button").trigger("click");
    await wrapper.find("select[name=role]").setValue("viewer");
    await wrapper.find("#user-form").trigger("submit");
    await flushPromises();
    expect(updateUser).toHaveBeenCalledWith(2, { username: "bob", role: "viewer", group_ids: [3], glue_permission: false });
  });

  it("marks the field the API names and clears it on edit; other errors show above the form", async () => {
    vi.mocked(createUser).mockRejectedValueOnce(new ApiError(409, "username taken", "username"));
    const { wrapper } = await mountView(UsersView, { path: "/users" });
    await wrapper.find("[data-testid=new-user]").trigger("click");
    await wrapper.find("input[name=username]").setValue("admin");
    await wrapper.find("#user-form").trigger("submit");
    await flushPromises();
    expect(wrapper.find("input[name=username]").attributes("aria-invalid")).toBe("true");
    expect(wrapper.find(".field-error").text()).toBe("username taken");
    expect(document.activeElement).toBe(wrapper.find("input[name=username]").element);
    await wrapper.find("input[name=username]").setValue("admin2");
    await flushPromises();
    expect(wrapper.find(".field-error").exists()).toBe(false);

    vi.mocked(createUser).mockRejectedValueOnce(new ApiError(500, "database unavailable"));
    await wrapper.find("#user-form").trigger("submit");
    await flushPromises();
    expect(wrapper.find("#user-form .form-error").text()).toBe("database unavailable");
  });

  it("deletes a user once confirmed", async () => {
    vi.mocked(deleteUser).mockResolvedValue(undefined);
    const { wrapper } = await mountView(UsersView, { path: "/users" });
    await clickAndConfirm(wrapper, wrapper.find("tr[data-user=bob] .danger-text"));
    expect(deleteUser).toHaveBeenCalledWith(2);
  });
});

describe("GroupsView", () => {
  const manual = group({
    id: 2, app_name: "billing", title: "Billing", address_type: 1, addresses: ["http://10.0.0.5:9999"], has_access_token: true,
    online: [{ address: "http://10.0.0.5:9999", last_heartbeat: "2026-01-01T00:00:00Z", dispatch: "push" }],
  });
  const mixed = group({
    id: 3, app_name: "mixed", title: "Mixed",
    online: [
      { address: "http://10.0.0.6:9999", last_heartbeat: "2026-01-01T00:00:00Z", handlers: ["export", "import"],
        dispatch: "push" },
      { address: "http://10.0.0.7:9999", last_heartbeat: "2026-01-01T00:00:00Z", handlers: null, dispatch: "push" },
      { address: "pull://worker-1/", last_heartbeat: "2026-01-01T00:00:00Z", handlers: null, dispatch: "pull" },
      { address: "broker://worker-2/", last_heartbeat: "2026-01-01T00:00:00Z", handlers: null, dispatch: "broker" },
    ],
  });

  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group(), manual, mixed]));
  });

  it("lists the groups with their online executors", async () => {
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    expect(wrapper.find("tr[data-group=reports]").text()).toContain("Reports");
    expect(wrapper.find("tr[data-group=billing] .addr-list").text()).toContain("http://10.0.0.5:9999");
  });

  it("shows each online executor's dispatch mode", async () => {
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    const modes = wrapper.findAll("tr[data-group=mixed] [data-testid=dispatch-mode]").map((m) => m.text());
    expect(modes).toEqual(["push", "push", "pull", "broker"]);
    expect(wrapper.find("tr[data-group=mixed] .addr-list").text()).toContain("pull://worker-1/");
    const hints = wrapper.findAll("tr[data-group=mixed] [data-testid=dispatch-mode]").map((m) => m.attributes("title"));
    expect(hints[3]).toContain("RabbitMQ");
  });

  it("shows the handlers each online executor declared, nothing for one that declared none", async () => {
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    const declared = wrapper.findAll("tr[data-group=mixed] [data-testid=declared-handlers]");
    expect(declared.map((d) => d.text())).toEqual(["handlers: export, import"]);
    expect(wrapper.find("tr[data-group=billing] [data-testid=declared-handlers]").exists()).toBe(false);
  });

  it("narrows the groups by a search and takes an address out of routing once confirmed", async () => {
    vi.mocked(setAddressDisabled).mockResolvedValue(manual);
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    await wrapper.find("input[name=group_search]").setValue("bill");
    expect(wrapper.findAll("tr[data-group]").map((r) => r.attributes("data-group"))).toEqual(["billing"]);
    await clickAndConfirm(wrapper, wrapper.find("tr[data-group=billing] [data-testid=disable-address]"));
    expect(setAddressDisabled).toHaveBeenCalledWith(2, "http://10.0.0.5:9999", true);
    vi.mocked(listGroups).mockResolvedValue(page([group(), { ...manual, disabled_addresses: ["http://10.0.0.5:9999"] }]));
    await wrapper.find("input[name=group_search]").setValue("");
    vi.mocked(setAddressDisabled).mockClear();
    const { wrapper: again } = await mountView(GroupsView, { path: "/groups" });
    const disabled = again.find("tr[data-group=billing] [data-testid=disabled-address]");
    expect(disabled.text()).toContain("http://10.0.0.5:9999");
    expect(again.find("tr[data-group=billing] [data-testid=disable-address]").exists()).toBe(false);
    await disabled.find("button").trigger("click");
    await flushPromises();
    expect(setAddressDisabled).toHaveBeenCalledWith(2, "http://10.0.0.5:9999", false);
  });

  it("creates a manual group from the addresses typed one a line", async () => {
    vi.mocked(createGroup).mockResolvedValue(group({ id: 3 }));
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    await wrapper.find("[data-testid=new-group]").trigger("click");
    await fill(wrapper, { app_name: "  payments ", title: "Payments" });
    await wrapper.find("input[name=address_type][value='1']").setValue(true);
    await wrapper.find("textarea[name=addresses]").setValue("http://a:1\nhttp://b:2\n");
    await wrapper.find("#group-form").trigger("submit");
    await flushPromises();
    expect(createGroup).toHaveBeenCalledWith({
      app_name: "payments", title: "Payments", address_type: 1, addresses: ["http://a:1", "http://b:2"],
    });
  });

  it("shows the API's field error under the field", async () => {
    vi.mocked(updateGroup).mockRejectedValue(new ApiError(400, "not an http(s) URL", "addresses.0"));
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    await wrapper.findAll("tr[data-group=billing] button").filter((b) => b.text() === "Edit")[0]!.trigger("click");
    await wrapper.find("#group-form").trigger("submit");
    await flushPromises();
    expect(updateGroup).toHaveBeenCalledWith(2, expect.objectContaining({ addresses: ["http://10.0.0.5:9999"] }));
    expect(wrapper.find("textarea[name=addresses]").attributes("aria-invalid")).toBe("true");
    expect(wrapper.find(".field-error").text()).toBe("not an http(s) URL");
  });

  it("shows and rotates a group's access token", async () => {
    vi.mocked(getGroupToken).mockResolvedValue({ access_token: "old-token", app_name: "billing", group_id: 2 });
    vi.mocked(rotateGroupToken).mockResolvedValue({ access_token: "new-token", app_name: "billing", group_id: 2 });
    const { wrapper } = await mountView(GroupsView, { path: "/groups" });
    await wrapper.findAll("tr[data-group=billing] button").filter((b) => b.text() === "Token")[0]!.trigger("click");
    await flushPromises();
    expect(wrapper.find("[data-testid=group-token]").text()).toBe("old-token");
    await clickAndConfirm(wrapper, wrapper.findAll("dialog .btn.danger")[0]!);
    expect(rotateGroupToken).toHaveBeenCalledWith(2);
    expect(wrapper.find("[data-testid=group-token]").text()).toBe("new-token");
  });
});

describe("SettingsView", () => {
  beforeEach(() => {
    vi.mocked(getSettings).mockResolvedValue({
      version: "1.2.3", database_backend: "sqlite", timezone: "Asia/Shanghai", base_path: "/", glue_enabled: false,
      global_access_token: true, email_alarms: false,
    });
    vi.mocked(getAccessToken).mockResolvedValue({ enabled: true, access_token: "s3cret" });
  });

  it("shows the settings with the token hidden until revealed", async () => {
    const { wrapper } = await mountView(SettingsView);
    expect(wrapper.text()).toContain("Asia/Shanghai");
    expect(wrapper.find("[data-testid=email-alarms]").text()).toContain("no SMTP server is configured");
    expect(wrapper.find("[data-testid=access-token]").text()).not.toContain("s3cret");
    await wrapper.find("button[aria-pressed]").trigger("click");
    await flushPromises();
    expect(wrapper.find("[data-testid=access-token]").text()).toBe("s3cret");
  });

  it("says when no global token is set", async () => {
    vi.mocked(getAccessToken).mockResolvedValue({ enabled: false, access_token: null });
    const { wrapper } = await mountView(SettingsView);
    expect(wrapper.find("[data-testid=access-token]").exists()).toBe(false);
  });

  it("shows a refusal as an error toast", async () => {
    vi.mocked(getSettings).mockRejectedValue(new ApiError(403, "admin only"));
    await mountView(SettingsView);
    expect(toastTexts("error")).toEqual(["Not permitted: admin only"]);
  });
});
