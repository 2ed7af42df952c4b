import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Job = Schemas["JobOut"];
export type Run = Schemas["RunOut"];
export type Group = Schemas["GroupOut"];
export type User = Schemas["UserOut"];
export type Token = Schemas["TokenOut"];
export type RunState = Schemas["RunState"];

/** The query parameters of a GET path (for the per-resource modules' list functions). */
export type QueryOf<P extends keyof paths> = paths[P] extends { get: { parameters: { query?: infer Q } } }
  ? NonNullable<Q>
  : never;

/** One page of a listing, as every list endpoint answers it. */
export interface Page<T> {
  items: T[];
  total: number;
  total_exact: boolean;
  next_cursor?: string | null;
}

const CSRF_COOKIE = "jobring_csrf";
const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);

export type ErrorParams = Record<string, string | number | boolean>;

/** One problem of a refused request (a 422 lists every one). */
export interface FieldProblem {
  field: string | null;
  message: string;
  code: string | null;
  params: ErrorParams;
}

/** The API's error body as a thrown error: status, message (English), the field it names, and
 * when the API gives them, a code with its params (the console's own words) and every problem. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly field: string | null = null,
    readonly code: string | null = null,
    readonly params: ErrorParams = {},
    readonly problems: FieldProblem[] = [],
  ) {
    super(message);
    this.name = "ApiError";
  }
}

const asParams = (v: unknown): ErrorParams => (v && typeof v === "object" ? (v as ErrorParams) : {});
const asText = (v: unknown): string | null => (typeof v === "string" ? v : null);

export function csrfToken(): string | null {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === CSRF_COOKIE) return decodeURIComponent(rest.join("="));
  }
  return null;
}

type Listener = (status: number) => void;
let onUnauthenticated: Listener = () => undefined;

/** Called on a 401 from any call but login and the session probe (the console then returns to the login page). */
export function setUnauthenticatedHandler(listener: Listener): void {
  onUnauthenticated = listener;
}

const session: Middleware = {
  onRequest({ request }) {
    if (UNSAFE.has(request.method)) {
      const token = csrfToken();
      if (token) request.headers.set("X-CSRF-Token", token);
    }
    return request;
  },
  onResponse({ request, response }) {
    // The session probe (/auth/me) and the login itself answer 401 as a matter of course.
    const path = new URL(request.url).pathname;
    if (response.status === 401 && !path.endsWith("/auth/login") && !path.endsWith("/auth/me")) onUnauthenticated(401);
    return response;
  },
};

/** The raw typed client: only the modules of this folder call it (a test keeps it so). */
export const api = createClient<paths>({ baseUrl: "/api/v1", credentials: "same-origin" });
api.use(session);

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The answer's data, or an ApiError with the API's message and field. */
export async function ok<T>(call: Promise<Answer<T>>): Promise<T> {
  let answer: Answer<T>;
  try {
    answer = await call;
  } catch (exc) {
    throw new ApiError(0, exc instanceof Error ? exc.message : String(exc));
  }
  if (answer.response.ok) return answer.data as T;
  const body = answer.error as { error?: unknown; field?: unknown; code?: unknown; params?: unknown; errors?: unknown } | undefined;
  const message = asText(body?.error) ?? (answer.response.statusText || "error");
  const problems = (Array.isArray(body?.errors) ? body.errors : []).map((p: Record<string, unknown>) => ({
    field: asText(p.field), message: asText(p.error) ?? "", code: asText(p.code), params: asParams(p.params),
  }));
  throw new ApiError(answer.response.status, message, asText(body?.field), asText(body?.code), asParams(body?.params), problems);
}
