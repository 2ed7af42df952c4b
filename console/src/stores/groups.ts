import { ref } from "vue";
import type { Group } from "../api/client";
import { listGroups } from "../api/groups";

/** The executor groups the user may see (for filters and names); reloaded on demand. */
export const groups = ref<Group[]>([]);
let loading: Promise<void> | null = null;

export function loadGroups(force = false): Promise<void> {
  if (loading && !force) return loading;
  loading = listGroups(500).then((page) => {
    groups.value = page.items;
  });
  loading.catch(() => (loading = null));
  return loading;
}

export function groupTitle(id: number): string {
  const g = groups.value.find((x) => x.id === id);
  return g ? g.title : `#${id}`;
}
