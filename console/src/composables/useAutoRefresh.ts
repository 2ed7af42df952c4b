import { onBeforeUnmount, onMounted } from "vue";

/** Calls `refresh` every `ms` while the page is shown: not while the browser tab is hidden nor
 * while a dialog is open (a refresh must not change what the user is deciding about). */
export function useAutoRefresh(refresh: () => unknown, ms: number): void {
  let timer: ReturnType<typeof setInterval> | undefined;
  onMounted(() => {
    timer = setInterval(() => {
      if (document.hidden || document.querySelector("dialog[open]")) return;
      void refresh();
    }, ms);
  });
  onBeforeUnmount(() => clearInterval(timer));
}
