import { onBeforeUnmount, ref } from "vue";

/** A ticking "now" (epoch ms) for live durations. */
export function useNow(intervalMs = 1000) {
  const now = ref(Date.now());
  const timer = setInterval(() => (now.value = Date.now()), intervalMs);
  onBeforeUnmount(() => clearInterval(timer));
  return now;
}
