// Mounts a view as the console does (router, signed-in user), with the API modules mocked by the test.
import { enableAutoUnmount, flushPromises, mount, type DOMWrapper, type VueWrapper } from "@vue/test-utils";
import { afterEach, beforeEach } from "vitest";
import { defineComponent, h, type Component } from "vue";
import { createMemoryHistory, createRouter, RouterView, type Router } from "vue-router";
import type { User } from "../../src/api/client";
import { session } from "../../src/stores/session";
import { toasts } from "../../src/stores/toast";
import { user } from "./fixtures";

enableAutoUnmount(afterEach);
beforeEach(() => {
  toasts.splice(0);
  Object.assign(session, { user: user(), loaded: true, glueEnabled: true, adminZone: "UTC", emailAlarms: true, expired: false });
});

const Root = defineComponent({ render: () => h(RouterView) });

export interface MountOptions {
  path?: string;
  props?: Record<string, unknown>;
  as?: Partial<User>;
  /** components to replace (by name), e.g. the CodeMirror editor */
  stubs?: Record<string, Component>;
}

/** Mounts `view` as the page of every path (inside a RouterView, as in the console). */
export async function mountView(view: Component, options: MountOptions = {}) {
  const routes = [{ path: "/:rest(.*)*", component: view, props: () => options.props ?? {} }];
  const router: Router = createRouter({ history: createMemoryHistory(), routes });
  await router.push(options.path ?? "/");
  await router.isReady();
  if (options.as) session.user = user(options.as);
  const wrapper = mount(Root, { global: { plugins: [router], stubs: options.stubs ?? {} }, attachTo: document.body });
  await flushPromises();
  return { wrapper, router };
}

/** The texts of the toasts shown, by kind. */
export const toastTexts = (kind: "ok" | "error") => toasts.filter((x) => x.kind === kind).map((x) => x.text);

/** Types into the fields of these names, in this order. */
export async function fill(wrapper: VueWrapper, values: Record<string, string>): Promise<void> {
  for (const [name, value] of Object.entries(values)) await wrapper.find(`[name=${name}]`).setValue(value);
}

/** Clicks `button`, says yes in the confirmation dialog and lets the calls settle. */
export async function clickAndConfirm(wrapper: VueWrapper, button: DOMWrapper<Element>): Promise<void> {
  await button.trigger("click");
  await wrapper.find("[data-testid=confirm-yes]").trigger("click");
  await flushPromises();
}
