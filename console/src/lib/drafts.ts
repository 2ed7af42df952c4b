// Unsaved edits kept across a sign-in (the session ended while the user was editing): stored
// in this tab's sessionStorage under the page's path, taken back once by that page.

const PREFIX = "jobring.draft:";

export function saveDraft(path: string, data: unknown): void {
  try {
    globalThis.sessionStorage?.setItem(PREFIX + path, JSON.stringify(data));
  } catch {
    // storage blocked or full: the edit cannot be kept
  }
}

/** The draft kept for `path` (removed as it is read), or null. */
export function takeDraft<T>(path: string): T | null {
  try {
    const raw = globalThis.sessionStorage?.getItem(PREFIX + path);
    if (raw === null || raw === undefined) return null;
    globalThis.sessionStorage.removeItem(PREFIX + path);
    return JSON.parse(raw) as T;
  } catch {
    return null;
  }
}
