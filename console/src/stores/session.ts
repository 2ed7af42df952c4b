import { reactive } from "vue";
import { currentUser, logout as endSession } from "../api/auth";
import { csrfToken, type User } from "../api/client";
import { getConsoleSettings } from "../api/settings";

interface SessionState {
  user: User | null;
  loaded: boolean;
  glueEnabled: boolean;
  adminZone: string;
  /** an SMTP server is configured: e-mail alarms can be sent */
  emailAlarms: boolean;
  /** the session cookies were there but the admin refused them (expired or ended) */
  expired: boolean;
}

export const session = reactive<SessionState>({
  user: null, loaded: false, glueEnabled: false, adminZone: "UTC", emailAlarms: true, expired: false,
});

export function isAdmin(): boolean {
  return session.user?.role === "admin";
}

/** Operators and admins may write; viewers only read. */
export function canWrite(): boolean {
  return session.user !== null && session.user.role !== "viewer";
}

export function canGlue(): boolean {
  return session.glueEnabled && (isAdmin() || (canWrite() && Boolean(session.user?.glue_permission)));
}

/** Who is logged in (null when nobody); loads the admin's settings too. */
export async function loadSession(): Promise<User | null> {
  if (!csrfToken()) {
    // No session cookies at all: not logged in (spares a 401 in the browser's console).
    session.loaded = true;
    session.user = null;
    return null;
  }
  const answer = await currentUser();
  session.loaded = true;
  session.user = answer.user;
  session.expired = answer.status === 401;
  if (session.user && !session.user.must_change_password) await loadSettings();
  return session.user;
}

export async function loadSettings(): Promise<void> {
  const settings = await getConsoleSettings();
  session.glueEnabled = settings.glue_enabled;
  session.adminZone = settings.timezone;
  session.emailAlarms = settings.email_alarms;
}

export async function logout(): Promise<void> {
  await endSession();
  session.user = null;
}
