import { afterEach, describe, expect, it, vi } from "vitest";
import { notify, toasts } from "../src/stores/toast";

describe("toasts", () => {
  afterEach(() => {
    toasts.splice(0);
    vi.useRealTimers();
  });

  it("shows the same message once, for longer, instead of stacking it", () => {
    vi.useFakeTimers();
    notify("Cannot reach the admin.", "error");
    vi.advanceTimersByTime(6000);
    notify("Cannot reach the admin.", "error");
    notify("Saved");
    expect(toasts.map((x) => x.text)).toEqual(["Cannot reach the admin.", "Saved"]);
    vi.advanceTimersByTime(6000); // 12 s after the first: the repeat kept it
    expect(toasts.map((x) => x.text)).toEqual(["Cannot reach the admin."]);
    vi.advanceTimersByTime(2000);
    expect(toasts).toEqual([]);
  });
});
