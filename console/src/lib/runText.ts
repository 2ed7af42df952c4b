// Run messages and logs as XXL-JOB writes them (and jobring, for compatibility): `<br>` for line
// breaks, `<span ...>` colouring in messages of adopted databases, and ">>>>>>>>>>> Title
// <<<<<<<<<<<" section markers. Shown as text: breaks become lines, markup is dropped, markers
// become section titles. Nothing is ever interpreted as HTML.

const BREAK = /<br\s*\/?>/i;
const SPAN = /<\/?span\b[^>]*>/gi;
const MARKER = /^\s*>{3,}\s*(.*?)\s*<{3,}\s*$/;

export interface TextLine {
  text: string;
  /** a section marker's title (`text` is then the title alone) */
  section: boolean;
}

/** One line of text as display lines (a `<br>` splits it). */
export function splitBreaks(line: string): string[] {
  return line.split(BREAK);
}

/** A message (trigger or handle) as display lines. */
export function messageLines(message: string | null | undefined): TextLine[] {
  if (!message) return [];
  return message
    .replace(SPAN, "")
    .split("\n")
    .flatMap(splitBreaks)
    .map((line) => {
      const marker = MARKER.exec(line);
      return marker ? { text: marker[1] ?? "", section: true } : { text: line, section: false };
    });
}

/** The message's last line that says something (not a section marker, not blank): for a failed
 * trigger, what the executor or the routing answered; a retry's marker does not hide it. */
export function messageSummary(message: string | null | undefined): string {
  const lines = messageLines(message).filter((l) => !l.section && l.text.trim());
  return lines.length ? lines[lines.length - 1]!.text.trim() : "";
}

/** What a run list shows about a run: the first line of its result, else (a failed run with no
 * result) the reason its trigger gave. */
export function runMessage(handleMsg: string | null | undefined, triggerMsg: string | null | undefined, failed: boolean): string {
  const handled = messageLines(handleMsg).find((l) => !l.section && l.text.trim());
  if (handled) return handled.text.trim();
  return failed ? messageSummary(triggerMsg) : "";
}
