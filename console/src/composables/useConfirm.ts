import { ref, type Ref } from "vue";
import { attempt } from "../stores/toast";

/** An action on one item that waits for the user's yes: set `pending` to open the dialog
 * (`v-if="pending"`), `confirm` closes it and runs the action (its error becomes a toast). */
export function useConfirm<T>(action: (item: T) => Promise<unknown>) {
  const pending = ref(null) as Ref<T | null>;
  async function confirm(): Promise<void> {
    const item = pending.value;
    pending.value = null;
    if (item !== null) await attempt(() => action(item));
  }
  return { pending, confirm };
}
