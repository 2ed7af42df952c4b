// The lines of run messages that jobring's admin and executors (and XXL-JOB's, whose texts
// jobring keeps on the wire) write in English, said in the reader's language. The stored text
// never changes: the API, the CLI and alarms keep the English original; only what the console
// shows is translated, line by line, and a line it does not know is shown as it is.
import { translate, type Locale, type MessageKey } from "../i18n";

interface KnownLine {
  pattern: RegExp;
  key: MessageKey;
  /** named groups that are themselves message text (translated in turn) */
  nested?: readonly string[];
}

const TRIGGER_TYPES: Record<string, string> = {
  "Manual trigger": "MANUAL", "Cron trigger": "CRON", "Fixed-rate trigger": "FIX_RATE",
  "Fail retry trigger": "RETRY", "Parent job trigger": "PARENT", "Api trigger": "API",
  "Misfire compensation trigger": "MISFIRE", "Delayed trigger": "DELAYED", "Workflow trigger": "WORKFLOW",
  "Backfill trigger": "BACKFILL",
};

// A kill's reason followed by what happened to the run (core/runstate.KILLED_SUFFIXES).
const KILLED_SUFFIXES: readonly [string, MessageKey][] = [
  [" [job running, killed]", "msg.killedRunning"],
  [" [job not executed, in the job queue, killed.]", "msg.killedQueued"],
];

const KNOWN: readonly KnownLine[] = [
  // the admin's trigger message (admin/trigger/dispatcher.py)
  { pattern: /^Admin node: (?<value>.*)$/, key: "msg.adminNode" },
  { pattern: /^Executor registry type: manual$/, key: "msg.registryManual" },
  { pattern: /^Executor registry type: automatic$/, key: "msg.registryAutomatic" },
  { pattern: /^Executor addresses: (?<value>.*)$/, key: "msg.addresses" },
  { pattern: /^Executors without handler '(?<handler>.*)': (?<value>.*)$/, key: "msg.undeclared" },
  { pattern: /^Route strategy: (?<value>.*)$/, key: "msg.route" },
  { pattern: /^Block strategy: (?<value>.*)$/, key: "msg.block" },
  { pattern: /^Timeout: (?<value>.*)$/, key: "msg.timeout" },
  { pattern: /^Fail retry count: (?<value>.*)$/, key: "msg.retryCount" },
  { pattern: /^Problem: (?<value>.*)$/, key: "msg.problem", nested: ["value"] },
  { pattern: /^Late: sent (?<ms>\d+) ms after its planned instant$/, key: "msg.late" },
  { pattern: /^address: (?<value>.*)$/, key: "msg.address" },
  { pattern: /^code: (?<value>.*)$/, key: "msg.code" },
  { pattern: /^msg: (?<value>.*)$/, key: "msg.msg", nested: ["value"] },
  // section titles (">>>>>>>>>>> Title <<<<<<<<<<<")
  { pattern: /^Trigger Job$/, key: "msg.sectionTrigger" },
  { pattern: /^Fail retry trigger$/, key: "msg.sectionRetry" },
  { pattern: /^Trigger child job$/, key: "msg.sectionChild" },
  // routing and the monitors
  { pattern: /^Trigger Fail: registry address is empty$/, key: "msg.addressEmpty" },
  { pattern: /^Trigger Fail: no online executor of group (?<group>.*) declares handler '(?<handler>.*)'$/, key: "msg.noDeclaring" },
  { pattern: /^Trigger Fail: the fire was recorded but never dispatched \(its admin node stopped before calling the executor\); marked as failed by the lost-run monitor$/, key: "msg.dispatchLost" },
  { pattern: /^Job result lost, marked as failure$/, key: "msg.resultLost" },
  { pattern: /^lost: executor (?<address>\S+) gone \(unregistered, or no heartbeat for (?<s>\d+) s\); marked lost by the lost-run monitor$/, key: "msg.executorGone" },
  { pattern: /^killed by user \((?<user>[^)]*)\)$/, key: "msg.killedByUser" },
  { pattern: /^killed by user \((?<user>[^)]*)\): (?<value>.*)$/, key: "msg.killedByUserSaid", nested: ["value"] },
  { pattern: /^(?<n>\d+)\/(?<total>\d+) \[Job ID=(?<id>[^\]]*)\], Trigger success, Trigger msg: submitted$/, key: "msg.childSubmitted" },
  { pattern: /^(?<n>\d+)\/(?<total>\d+) \[Job ID=(?<id>[^\]]*)\], Trigger Fail, Trigger msg: Job ID is illegal$/, key: "msg.childIllegal" },
  { pattern: /^(?<n>\d+)\/(?<total>\d+) \[Job ID=(?<id>[^\]]*)\], Trigger Fail, Trigger msg: (?<value>.*)$/, key: "msg.childFailed" },
  // executors (jobring's and XXL-JOB's own texts)
  { pattern: /^job handler \[(?<name>.*)\] not found\.$/, key: "msg.handlerNotFound" },
  { pattern: /^block strategy effect[：:]Discard Later$/, key: "msg.discardLater" },
  { pattern: /^block strategy effect[：:]Cover Early$/, key: "msg.coverEarly" },
  { pattern: /^scheduling center kill job\.$/, key: "msg.centerKill" },
  { pattern: /^change jobhandler or glue type, and terminate the old job thread\.$/, key: "msg.changeHandler" },
  { pattern: /^change job source or glue type, and terminate the old job thread\.$/, key: "msg.changeSource" },
  { pattern: /^excutor idel times over limit\.$/, key: "msg.idle" },
  { pattern: /^executor stopping$/, key: "msg.executorStopping" },
  { pattern: /^web container destroy and kill the job\.$/, key: "msg.executorStopping" },
  { pattern: /^job execute timeout ?$/, key: "msg.executeTimeout" },
  { pattern: /^job thread already killed\.$/, key: "msg.alreadyKilled" },
  { pattern: /^job thread is running or has trigger queue\.$/, key: "msg.busy" },
  { pattern: /^executor is stopping, run not accepted\.$/, key: "msg.notAccepting" },
  { pattern: /^job queue full: (?<waiting>\d+) runs of this job wait behind its running run \(max_queued_per_job=(?<cap>\d+)\); run not accepted\.$/, key: "msg.queueFull" },
  { pattern: /^executor is not started\.$/, key: "msg.notStarted" },
  { pattern: /^readLog fail, logFile not exists$/, key: "msg.logNotExists" },
  { pattern: /^already received: this run was accepted before \(not run again\)$/, key: "msg.alreadyReceived" },
  { pattern: /^glueType\[(?<type>[^\]]*)\] cannot run: interpreter (?<name>\S+) not found on this executor's PATH\.$/, key: "msg.noInterpreter" },
  { pattern: /^The access token is wrong\.$/, key: "msg.tokenWrong" },
];

function known(line: string, lang: Locale): string | null {
  if (line.startsWith("Trigger type: ")) {
    const title = line.slice("Trigger type: ".length);
    const type = TRIGGER_TYPES[title];
    const value = type ? translate(lang, `trigger.type.${type}` as MessageKey) : title;
    return translate(lang, "msg.triggerType", { value });
  }
  for (const [suffix, key] of KILLED_SUFFIXES) {
    if (line.endsWith(suffix) && line.length > suffix.length) {
      return translate(lang, key, { reason: localizeLine(line.slice(0, -suffix.length), lang) });
    }
  }
  for (const { pattern, key, nested } of KNOWN) {
    const match = pattern.exec(line);
    if (!match) continue;
    const params: Record<string, string> = { ...match.groups };
    for (const name of nested ?? []) params[name] = localizeLine(params[name] ?? "", lang);
    return translate(lang, key, params);
  }
  return null;
}

/** One display line of a trigger or handle message in `lang` (English lines stay as written). */
export function localizeLine(line: string, lang: Locale): string {
  if (lang === "en") return line;
  const indent = /^\s*/.exec(line)![0];
  const said = known(line.trim(), lang);
  return said === null ? line : indent + said;
}
