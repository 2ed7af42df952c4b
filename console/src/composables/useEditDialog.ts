import { reactive, ref, type Ref } from "vue";
import { attempt } from "../stores/toast";
import { useFormErrors } from "./useFormErrors";

export interface EditDialogOptions<T, F extends object> {
  /** the form of a new item */
  blank: () => F;
  /** the form of an existing item */
  fromItem: (item: T) => F;
  /** creates (`item` null) or updates the item from the form */
  save: (form: F, item: T | null) => Promise<unknown>;
  /** after a save: reload what shows the items */
  saved: () => Promise<unknown>;
}

/** The dialog that creates or edits one item of a list: `editing` is the item, "new" or null (closed). */
export function useEditDialog<T, F extends object>(options: EditDialogOptions<T, F>) {
  const editing = ref(null) as Ref<T | "new" | null>;
  const form = reactive(options.blank()) as F;
  const errors = useFormErrors(form);

  function open(item: T | "new"): void {
    editing.value = item;
    Object.assign(form, item === "new" ? options.blank() : options.fromItem(item));
    errors.clear();
  }

  async function save(): Promise<void> {
    const item = editing.value;
    if (item === null) return;
    errors.clear();
    try {
      await options.save(form, item === "new" ? null : item);
    } catch (exc) {
      await errors.show(exc);
      return;
    }
    editing.value = null;
    await attempt(options.saved);
  }

  return { editing, form, errors, open, save };
}
