import { nextTick, reactive, ref, watch } from "vue";
import { ApiError } from "../api/client";
import { errorText, notifyError } from "../stores/toast";

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
    if (exc instanceof ApiError && exc.field) {
      const name = exc.field.split(".")[0] ?? exc.field;
      const prefix = `${exc.field}: `;
      fields[name] = exc.message.startsWith(prefix) ? exc.message.slice(prefix.length) : exc.message;
      await nextTick();
      const marked = document.querySelector<HTMLElement>("[aria-invalid='true']");
      if (marked) {
        marked.focus();
        return;
      }
      delete fields[name];
      formError.value = errorText(exc);
    } else if (exc instanceof ApiError && exc.status !== 401) {
      formError.value = errorText(exc);
    } else notifyError(exc); // a 401 returns to the sign-in page
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
