import { createRouter, createWebHistory, type RouteRecordRaw } from "vue-router";
import { setUnauthenticatedHandler } from "./api/client";
import { t } from "./i18n";
import { isAdmin, loadSession, session } from "./stores/session";
import { notify, notifyError } from "./stores/toast";

declare module "vue-router" {
  interface RouteMeta {
    public?: boolean;
    admin?: boolean;
    title?: string;
  }
}

const routes: RouteRecordRaw[] = [
  { path: "/login", component: () => import("./views/LoginView.vue"), meta: { public: true } },
  { path: "/password", component: () => import("./views/PasswordView.vue"), meta: { public: true } },
  { path: "/", component: () => import("./views/DashboardView.vue") },
  { path: "/jobs", component: () => import("./views/JobsView.vue") },
  { path: "/jobs/new", component: () => import("./views/JobEditView.vue") },
  { path: "/jobs/:id(\\d+)", component: () => import("./views/JobEditView.vue"), props: true },
  { path: "/jobs/:id(\\d+)/glue", component: () => import("./views/GlueView.vue"), props: true },
  { path: "/runs", component: () => import("./views/RunsView.vue") },
  { path: "/runs/:id(\\d+)", component: () => import("./views/RunDetailView.vue"), props: true },
  { path: "/groups", component: () => import("./views/GroupsView.vue") },
  { path: "/calendars", component: () => import("./views/CalendarsView.vue") },
  { path: "/workflows", component: () => import("./views/WorkflowsView.vue") },
  { path: "/workflows/new", component: () => import("./views/WorkflowEditView.vue") },
  { path: "/workflows/:id(\\d+)", component: () => import("./views/WorkflowEditView.vue"), props: true },
  { path: "/workflow-runs", component: () => import("./views/WorkflowRunsView.vue") },
  { path: "/workflow-runs/:id(\\d+)", component: () => import("./views/WorkflowRunView.vue"), props: true },
  { path: "/users", component: () => import("./views/UsersView.vue"), meta: { admin: true } },
  { path: "/audit", component: () => import("./views/AuditView.vue"), meta: { admin: true } },
  { path: "/settings", component: () => import("./views/SettingsView.vue"), meta: { admin: true } },
  { path: "/profile", component: () => import("./views/ProfileView.vue") },
  { path: "/:rest(.*)*", component: () => import("./views/NotFoundView.vue") },
];

export const router = createRouter({ history: createWebHistory(), routes });

router.beforeEach(async (to) => {
  if (!session.loaded) await loadSession();
  if (to.meta.public) {
    if (to.path === "/password" && !session.user) return { path: "/login" };
    return true;
  }
  if (!session.user) {
    const query: Record<string, string> = { next: to.fullPath };
    if (session.expired) query.expired = "1";
    return { path: "/login", query };
  }
  if (session.user.must_change_password) return { path: "/password", query: { next: to.fullPath } };
  if (to.meta.admin && !isAdmin()) return { path: "/" };
  return true;
});

setUnauthenticatedHandler(() => {
  const current = router.currentRoute.value;
  if (current.meta.public) return;
  session.user = null;
  void router.push({ path: "/login", query: { next: current.fullPath, expired: "1" } });
});

// A page not loaded yet whose code cannot be fetched (the admin is down, or was upgraded and no
// longer has this build's files): the navigation stops where it is and says so.
const CHUNK_FAILURE = /dynamically imported module|Importing a module script failed|Failed to fetch/i;
router.onError((error: unknown) => {
  if (error instanceof Error && CHUNK_FAILURE.test(error.message)) notify(t("error.pageLoad"), "error");
  else notifyError(error);
});
