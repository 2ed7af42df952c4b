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

  /** Shows the error by the field it names (`executor.param` -> `executor`), else above the form. */
  async function show(exc: unknown): Promise<void> {
    clear();
    if (exc instanceof ApiError && exc.field) {
      fields[exc.field.split(".")[0] ?? exc.field] = exc.message;
      await nextTick();
      document.querySelector<HTMLElement>("[aria-invalid='true']")?.focus();
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
