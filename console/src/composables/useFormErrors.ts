import { nextTick, reactive, ref, watch } from "vue";
import { ApiError } from "../api/client";
import { codedText, errorText, notifyError } from "../stores/toast";

/** A form's errors: the API's `field` errors by form field (cleared when that field is edited), and a
 * form-level message for the errors that name no field. The answer is reactive (`errors.formError`). */
export function useFormErrors<F extends object>(form: F) {
  const fields = reactive<Record<string, string>>({});
  const formError = ref("");

  function clear(): void {
    for (const key of Object.keys(fields)) delete fields[key];
    formError.value = "";
  }

  /** Shows the error at the field it names (`alarm_targets.0.url` -> `alarm_targets`) and focuses
   * that field; when no control of the form shows that field, above the form (never lost). */
  async function show(exc: unknown): Promise<void> {
    clear();
    if (!(exc instanceof ApiError) || exc.status === 401) {
      notifyError(exc); // a 401 returns to the sign-in page
      return;
    }
    // Every problem the API listed (a 422 lists all of a request's), else the one it named.
    const problems = exc.problems.length ? exc.problems
      : exc.field ? [{ field: exc.field, message: exc.message, code: exc.code, params: exc.params }] : [];
    if (problems.length === 0) {
      formError.value = errorText(exc);
      return;
    }
    for (const p of problems) {
      const field = p.field ?? "";
      const name = field.split(".")[0] ?? field;
      const prefix = `${field}: `;
      const own = codedText(p.code, p.params, field, name !== field);
      if (!fields[name]) fields[name] = own ?? (p.message.startsWith(prefix) && name === field ? p.message.slice(prefix.length) : p.message);
    }
    await nextTick();
    // A problem no control of this form shows goes above the form (never lost).
    // (A control is found by its name, or by data-field when its name differs from the API's.)
    const shownAt = (name: string) => /^[\w-]+$/.test(name)
      && document.querySelector(`[aria-invalid='true']:is([name='${name}'], [data-field='${name}'])`);
    const unshown = problems.filter((p) => !shownAt((p.field ?? "").split(".")[0] ?? ""));
    for (const p of unshown) delete fields[(p.field ?? "").split(".")[0] ?? ""];
    formError.value = unshown.map((p) => codedText(p.code, p.params, p.field, true) ?? p.message).join("\n");
    document.querySelector<HTMLElement>("[aria-invalid='true']")?.focus();
  }

  /** Marks a field invalid from the console's own check. */
  function set(field: string, message: string): void {
    fields[field] = message;
  }

  const err = (field: string): string | undefined => fields[field];

  watch(() => ({ ...form }), (now, before) => {
    for (const key of Object.keys(now) as (keyof F & string)[]) if (now[key] !== before[key]) delete fields[key];
  });

  return reactive({ fields, formError, err, clear, show, set });
}
