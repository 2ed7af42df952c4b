import { computed, onMounted, reactive, ref, type Ref } from "vue";
import { useRoute, useRouter, type LocationQuery } from "vue-router";
import { ApiError, type Page } from "../api/client";
import { errorText } from "../stores/toast";

/** What one page asks for: `cursor` walks the API's keyset pages, `offset` numbers the rows. */
export interface PageAsk {
  offset: number;
  limit: number;
  cursor: string | undefined;
}

export interface ListQueryOptions<F extends Record<string, string>, T> {
  /** the filters and their defaults; the URL query's values win on the first load */
  filters: F;
  fetch: (filters: Readonly<F>, page: PageAsk) => Promise<Page<T>>;
  /** rows a page when the URL does not say (default 20) */
  limit?: number;
  /** walk pages with the API's `next_cursor` (cheap at any depth) instead of an offset */
  cursor?: boolean;
  /** the filter each API query parameter comes from, to mark the filter a refusal names */
  fields?: Record<string, keyof F & string>;
}

/** What the pager shows and does (see PagerBar). */
export interface Pager {
  readonly offset: number;
  readonly limit: number;
  readonly total: number;
  /** false: the total is an estimate */
  readonly totalExact: boolean;
  readonly hasMore: boolean;
  goPage(offset: number): void;
  setLimit(rows: number): void;
}

const text = (v: unknown): string => (typeof v === "string" ? v : "");

/** A listing whose filters and page live in the URL query: loading state, paging, refresh.
 * The answer is reactive (read `list.items`, `list.filters.group` ...). */
export function useListQuery<F extends Record<string, string>, T>(options: ListQueryOptions<F, T>) {
  const route = useRoute();
  const router = useRouter();
  const defaults = { ...options.filters };
  const defaultLimit = options.limit ?? 20;
  const query: LocationQuery = route.query;
  const filters = reactive({ ...defaults }) as F;
  for (const key of Object.keys(defaults) as (keyof F & string)[]) {
    const value = text(query[key]);
    if (value !== "") (filters as Record<string, string>)[key] = value;
  }
  const items = ref([]) as Ref<T[]>;
  const total = ref(0);
  const totalExact = ref(true);
  const loading = ref(false);
  const limit = ref(Number(text(query.limit)) || defaultLimit);
  const offset = ref(options.cursor ? 0 : Number(text(query.offset)) || 0);
  // With a cursor the pages walked so far are a stack of cursors (the first page has none).
  const cursors: (string | undefined)[] = [undefined];
  const nextCursor = ref<string | null>(null);
  // A refused listing shows its error instead of rows: rows of other filters would mislead.
  // A listing that could not be reached keeps the rows it had, under the error.
  const error = ref("");
  const errorField = ref("");
  const empty = computed(() => !loading.value && !error.value && items.value.length === 0);
  const hasMore = computed(() => (options.cursor ? nextCursor.value !== null : offset.value + limit.value < total.value));

  function urlQuery(): Record<string, string> {
    const shown: Record<string, string> = {};
    for (const [key, value] of Object.entries(filters)) if (value !== "" && value !== defaults[key]) shown[key] = value;
    if (!options.cursor && offset.value) shown.offset = String(offset.value);
    if (limit.value !== defaultLimit) shown.limit = String(limit.value);
    return shown;
  }

  /** Loads the current page again (and writes the filters into the URL). */
  async function load(): Promise<void> {
    loading.value = true;
    void router.replace({ query: urlQuery() });
    try {
      const page = await options.fetch(filters, {
        offset: options.cursor ? 0 : offset.value,
        limit: limit.value,
        cursor: cursors[cursors.length - 1],
      });
      items.value = page.items;
      total.value = page.total;
      totalExact.value = page.total_exact;
      nextCursor.value = page.next_cursor ?? null;
      error.value = "";
      errorField.value = "";
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 401) return; // the sign-in page takes over
      error.value = errorText(exc);
      const field = exc instanceof ApiError && exc.field ? exc.field.split(".")[0] ?? "" : "";
      errorField.value = options.fields?.[field] ?? "";
      if (exc instanceof ApiError && exc.status >= 400 && exc.status < 500) {
        items.value = [];
        total.value = 0;
        nextCursor.value = null;
      }
    } finally {
      loading.value = false;
    }
  }

  /** Back to the first page with the filters as they are now. */
  function search(): void {
    offset.value = 0;
    cursors.splice(1);
    void load();
  }

  function reset(): void {
    Object.assign(filters, defaults);
    search();
  }

  function goPage(to: number): void {
    if (options.cursor) {
      if (to > offset.value && nextCursor.value) cursors.push(nextCursor.value);
      else if (to < offset.value && cursors.length > 1) cursors.pop();
      else return;
    }
    offset.value = to;
    void load();
  }

  function setLimit(rows: number): void {
    limit.value = rows;
    search();
  }

  onMounted(() => void load());
  return reactive({ filters, items, total, totalExact, loading, empty, error, errorField, offset, limit, hasMore, load, search, reset, goPage, setLimit });
}
