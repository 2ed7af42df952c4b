// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { saveDraft, takeDraft } from "../src/lib/drafts";

describe("drafts", () => {
  it("keeps a page's unsaved edits until that page takes them, once", () => {
    saveDraft("/jobs/7", { job_desc: "edited" });
    expect(takeDraft("/jobs/8")).toBeNull();
    expect(takeDraft("/jobs/7")).toEqual({ job_desc: "edited" });
    expect(takeDraft("/jobs/7")).toBeNull();
  });
});
