// @vitest-environment happy-dom
// Component tests of signing in and one's own account (the API modules mocked).
import { flushPromises, type VueWrapper } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { login } from "../../src/api/auth";
import { locale } from "../../src/i18n";
import { ApiError } from "../../src/api/client";
import { getConsoleSettings } from "../../src/api/settings";
import { createToken, listTokens, revokeToken } from "../../src/api/tokens";
import { changeOwnPassword } from "../../src/api/users";
import { session } from "../../src/stores/session";
import LoginView from "../../src/views/LoginView.vue";
import PasswordView from "../../src/views/PasswordView.vue";
import ProfileView from "../../src/views/ProfileView.vue";
import { token, user } from "./fixtures";
import { clickAndConfirm, fill, mountView, toastTexts } from "./harness";

vi.mock("../../src/api/auth");
vi.mock("../../src/api/settings");
vi.mock("../../src/api/tokens");
vi.mock("../../src/api/users");

describe("signing in", () => {
  beforeEach(() => {
    session.user = null;
    vi.mocked(getConsoleSettings).mockResolvedValue({ glue_enabled: true, timezone: "Europe/Berlin", email_alarms: true });
  });

  async function signIn(path: string) {
    const mounted = await mountView(LoginView, { path });
    await mounted.wrapper.find("input[name=username]").setValue("alice");
    await mounted.wrapper.find("input[name=password]").setValue("her password");
    await mounted.wrapper.find("form").trigger("submit");
    await flushPromises();
    return mounted;
  }

  describe("LoginView", () => {
    it("signs in and goes on to the page asked for", async () => {
      vi.mocked(login).mockResolvedValue({ auth: "session", user: user({ username: "alice" }) });
      const { router } = await signIn("/login?next=/runs");
      expect(login).toHaveBeenCalledWith({ username: "alice", password: "her password" });
      expect(session.adminZone).toBe("Europe/Berlin");
      expect(router.currentRoute.value.fullPath).toBe("/runs");
    });

    it("never goes on to another origin", async () => {
      vi.mocked(login).mockResolvedValue({ auth: "session", user: user({ username: "alice" }) });
      const { router } = await signIn("/login?next=//evil.example/");
      expect(router.currentRoute.value.fullPath).toBe("/");
    });

    it("sends a user who must change the password to the password page", async () => {
      vi.mocked(login).mockResolvedValue({ auth: "session", user: user({ username: "alice", must_change_password: true }) });
      const { router } = await signIn("/login?next=/jobs");
      expect(router.currentRoute.value.path).toBe("/password");
      expect(router.currentRoute.value.query).toEqual({ next: "/jobs" });
    });

    it("shows a refused sign-in above the form", async () => {
      vi.mocked(login).mockRejectedValue(new ApiError(401, "wrong username or password"));
      const { wrapper } = await signIn("/login");
      expect(wrapper.find(".form-error").text()).toBe("wrong username or password");
    });

    it("says a refused sign-in in the console's language when the API gives its code", async () => {
      vi.mocked(login).mockRejectedValue(new ApiError(401, "wrong username or password", null, "auth.wrong_login"));
      locale.value = "zh-CN";
      try {
        const { wrapper } = await signIn("/login");
        expect(wrapper.find(".form-error").text()).toBe("用户名或密码错误。");
      } finally {
        locale.value = "en";
      }
    });
  });

  describe("PasswordView", () => {
    it("changes the forced password and goes on", async () => {
      session.user = user({ must_change_password: true });
      vi.mocked(changeOwnPassword).mockResolvedValue({ auth: "session", revoked: { sessions: 0, tokens: 0 }, user: user() });
      const { wrapper, router } = await mountView(PasswordView, { path: "/password?next=/groups" });
      expect(wrapper.find(".notice").exists()).toBe(true);
      for (const [name, value] of [["current_password", "generated"], ["new_password", "mine now"], ["repeat_password", "mine now"]]) {
        await wrapper.find(`input[name=${name}]`).setValue(value);
      }
      await wrapper.find("form").trigger("submit");
      await flushPromises();
      expect(changeOwnPassword).toHaveBeenCalledWith({ current_password: "generated", new_password: "mine now" });
      expect(router.currentRoute.value.fullPath).toBe("/groups");
    });
  });
});

describe("ProfileView", () => {
  beforeEach(() => {
    vi.mocked(listTokens).mockResolvedValue([token({ id: 1, name: "ci" }), token({ id: 2, name: "old", revoked: true })]);
  });

  const passwordForm = (wrapper: VueWrapper) => wrapper.findAll("form").filter((f) => f.find("input[name=current_password]").exists())[0]!;

  it("lists the tokens and revokes one once confirmed", async () => {
    vi.mocked(revokeToken).mockResolvedValue(undefined);
    const { wrapper } = await mountView(ProfileView, { path: "/profile" });
    expect(wrapper.findAll("table.compact tbody tr")).toHaveLength(2);
    await clickAndConfirm(wrapper, wrapper.find("table.compact .danger-text"));
    expect(revokeToken).toHaveBeenCalledWith(1);
    expect(listTokens).toHaveBeenCalledTimes(2);
  });

  it("shows a new token once", async () => {
    vi.mocked(createToken).mockResolvedValue({ ...token({ id: 3, name: "deploy" }), token: "jr_abc" });
    const { wrapper } = await mountView(ProfileView, { path: "/profile" });
    await wrapper.find("input[name=token_name]").setValue("deploy");
    await wrapper.find("select[name=token_days]").setValue("30");
    await wrapper.find("form.input-group").trigger("submit");
    await flushPromises();
    expect(createToken).toHaveBeenCalledWith({ name: "deploy", expires_in_days: 30 });
    expect(wrapper.find("[data-testid=new-token]").text()).toBe("jr_abc");
  });

  it("shows a refused token name above its form", async () => {
    vi.mocked(createToken).mockRejectedValue(new ApiError(400, "name already used", "name"));
    const { wrapper } = await mountView(ProfileView, { path: "/profile" });
    await wrapper.find("input[name=token_name]").setValue("ci");
    await wrapper.find("form.input-group").trigger("submit");
    await flushPromises();
    expect(wrapper.find("input[name=token_name]").attributes("aria-invalid")).toBe("true");
    expect(wrapper.find(".form-error").text()).toBe("name already used");
  });

  it("changes the password, checking the repeat first", async () => {
    vi.mocked(changeOwnPassword).mockResolvedValue({ auth: "session", revoked: { sessions: 0, tokens: 0 }, user: user({ username: "admin" }) });
    const { wrapper } = await mountView(ProfileView, { path: "/profile" });
    await fill(wrapper, {
      current_password: "old password", new_password: "new password 1", repeat_password: "new password 2",
    });
    await passwordForm(wrapper).trigger("submit");
    await flushPromises();
    expect(changeOwnPassword).not.toHaveBeenCalled();
    expect(wrapper.find(".field-error").text()).toBe("The two new passwords differ.");
    await wrapper.find("input[name=repeat_password]").setValue("new password 1");
    await passwordForm(wrapper).trigger("submit");
    await flushPromises();
    expect(changeOwnPassword).toHaveBeenCalledWith({ current_password: "old password", new_password: "new password 1" });
    expect(toastTexts("ok")).toEqual(["Password changed."]);
    expect(session.user?.username).toBe("admin");
  });

  it("marks a wrong current password", async () => {
    vi.mocked(changeOwnPassword).mockRejectedValue(new ApiError(403, "current_password is wrong", "current_password"));
    const { wrapper } = await mountView(ProfileView, { path: "/profile" });
    await fill(wrapper, { current_password: "nope", new_password: "new password 1", repeat_password: "new password 1" });
    await passwordForm(wrapper).trigger("submit");
    await flushPromises();
    expect(wrapper.find("input[name=current_password]").attributes("aria-invalid")).toBe("true");
    expect(wrapper.find(".field-error").text()).toBe("current_password is wrong");
  });
});
