import { describe, expect, it } from "vitest";
import { messageLines, messageSummary, runMessage, splitBreaks } from "../src/lib/runText";

const TRIGGER = "Trigger type: Cron trigger\nAdmin node: a\n\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\naddress: http://x:9999\ncode: 500\nmsg: connection refused";

describe("run text", () => {
  it("turns XXL-JOB's <br> into lines and its markers into section titles", () => {
    expect(splitBreaks("<br>----------- start -----------<br>----------- Param:x")).toEqual(["", "----------- start -----------", "----------- Param:x"]);
    expect(messageLines('a<br/>b\n<span style="color:#00c0ef;" > >>>>>>>>>>>Trigger<<<<<<<<<<< </span>')).toEqual([
      { text: "a", section: false }, { text: "b", section: false }, { text: "Trigger", section: true },
    ]);
  });

  it("summarises a failed trigger by its reason, also under a retry marker", () => {
    expect(messageSummary(TRIGGER)).toBe("msg: connection refused");
    expect(messageSummary(`${TRIGGER}\n\n>>>>>>>>>>> Fail retry trigger <<<<<<<<<<<`)).toBe("msg: connection refused");
    expect(runMessage(null, `${TRIGGER}\n\n>>>>>>>>>>> Fail retry trigger <<<<<<<<<<<`, true)).toBe("msg: connection refused");
    expect(runMessage("exit 1<br>more", TRIGGER, true)).toBe("exit 1");
    expect(runMessage(null, TRIGGER, false)).toBe("");
  });

  it("keeps markup other than XXL-JOB's as text", () => {
    expect(messageLines("<img src=x onerror=alert(1)>")).toEqual([{ text: "<img src=x onerror=alert(1)>", section: false }]);
  });
});
