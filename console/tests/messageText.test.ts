import { describe, expect, it } from "vitest";
import { localizeLine } from "../src/lib/messageText";
import { messageLines } from "../src/lib/runText";

// A trigger message as admin/trigger/dispatcher.py writes it, then a retry's marker.
const TRIGGER = [
  "Trigger type: Cron trigger", "Admin node: node-1", "Executor registry type: automatic",
  "Executor addresses: [http://127.0.0.1:9999]", "Route strategy: FIRST", "Block strategy: SERIAL_EXECUTION",
  "Timeout: 0", "Fail retry count: 1", "Late: sent 1200 ms after its planned instant", "",
  ">>>>>>>>>>> Trigger Job <<<<<<<<<<<", "address: http://127.0.0.1:9999", "code: 500",
  "msg: job handler [demo] not found.", "", ">>>>>>>>>>> Fail retry trigger <<<<<<<<<<<",
].join("\n");

const zh = (message: string): string[] => messageLines(message).map((l) => localizeLine(l.text, "zh-CN"));

describe("run messages in the reader's language", () => {
  it("says every line of the admin's trigger message in Chinese, values kept", () => {
    expect(zh(TRIGGER)).toEqual([
      "任务触发类型：调度触发", "调度节点：node-1", "执行器注册方式：自动注册",
      "执行器地址列表：[http://127.0.0.1:9999]", "路由策略：FIRST", "阻塞处理策略：SERIAL_EXECUTION",
      "任务超时时间：0", "失败重试次数：1", "延迟：比计划时间晚 1200 毫秒发出", "",
      "触发调度", "地址：http://127.0.0.1:9999", "状态码：500",
      "消息：任务处理器 [demo] 不存在。", "", "失败重试触发",
    ]);
  });

  it("translates the executors' handle messages, XXL-JOB's texts included", () => {
    expect(localizeLine("block strategy effect：Discard Later", "zh-CN")).toBe("阻塞处理策略生效：丢弃后续调度");
    expect(localizeLine("job execute timeout ", "zh-CN")).toBe("任务执行超时");
    expect(localizeLine("scheduling center kill job. [job running, killed]", "zh-CN")).toBe("调度中心终止任务。 [任务运行中，已终止]");
    expect(localizeLine("block strategy effect：Cover Early [job not executed, in the job queue, killed.]", "zh-CN"))
      .toBe("阻塞处理策略生效：覆盖之前调度 [任务未执行，在队列中，已终止]");
    expect(localizeLine("killed by user (ann): job thread already killed.", "zh-CN")).toBe("已被用户终止（ann）：任务线程已被终止。");
    expect(localizeLine("lost: executor http://10.0.0.5:9999 gone (unregistered, or no heartbeat for 90 s); marked lost by the lost-run monitor", "zh-CN"))
      .toBe("丢失：执行器 http://10.0.0.5:9999 已离线（已注销，或 90 秒无心跳）；由丢失任务监控标记为丢失");
    expect(localizeLine("2/3 [Job ID=7], Trigger Fail, Trigger msg: Job ID is illegal", "zh-CN")).toBe("2/3 [任务 ID=7]，触发失败，触发备注：任务 ID 非法");
  });

  it("leaves unknown lines, user text and English alone", () => {
    expect(localizeLine("rows imported: 12", "zh-CN")).toBe("rows imported: 12");
    expect(localizeLine("Trigger type: Something new", "zh-CN")).toBe("任务触发类型：Something new");
    expect(localizeLine("<img src=x onerror=alert(1)>", "zh-CN")).toBe("<img src=x onerror=alert(1)>");
    expect(localizeLine("  job execute timeout", "zh-CN")).toBe("  任务执行超时");
    expect(zh(TRIGGER).length).toBe(messageLines(TRIGGER).length);
    for (const line of messageLines(TRIGGER)) expect(localizeLine(line.text, "en")).toBe(line.text);
  });
});
