// The failed runs of a backfill: a paged table (sort ordinal, logical date, run, attempt and
// the worker's note) read from the slot listing filtered by state, following next_cursor so
// that a page deep in a 40,000-slot backfill costs what the first does.

import { fmtTime } from "./time.js";
import { count as fmt } from "./format.js";

const PAGE = 50;

// failedRunsSection makes the section; refresh() re-reads the current page. With no failed run
// it is one line: no header, no table, no pager.
export function failedRunsSection(id, { api, h, onError }) {
  const count = h("p", { class: "muted", id: "failed-count" });
  const body = h("tbody", { id: "failed-runs" });
  const prev = h("button", { type: "button", class: "secondary", id: "failed-prev" }, "Previous page");
  const next = h("button", { type: "button", class: "secondary", id: "failed-next" }, "Next page");
  // cursors[i] is the cursor of page i (null for the first page).
  const cursors = [null];
  let page = 0;
  let nextCursor = null;
  // Only the latest read draws: a refresh that started before a click must not draw the
  // page before under the new page's numbers.
  let reads = 0;

  const load = async () => {
    const read = ++reads;
    const c = cursors[page];
    const q = `state=failed&limit=${PAGE}` + (c ? `&cursor=${encodeURIComponent(c)}` : "");
    const { data } = await api("GET", `/backfills/${id}/dag_runs?${q}`);
    if (read !== reads) return;
    nextCursor = data.next_cursor;
    const first = page * PAGE + 1;
    const none = data.total_entries === 0;
    count.textContent = none ? "No failed runs."
      : `${fmt(data.total_entries)} failed run${data.total_entries === 1 ? "" : "s"}; showing ${fmt(first)}–${fmt(first + data.backfill_dag_runs.length - 1)}.`;
    for (const el of [header, table, pager]) el.hidden = none;
    body.replaceChildren(...data.backfill_dag_runs.map((s) => h("tr", { "data-run-id": s.run_id },
      h("td", {}, fmt(s.sort_ordinal)),
      h("td", {}, fmtTime(s.logical_date)),
      h("td", {}, s.run_id ?? "—"),
      h("td", {}, s.attempt ?? "—"),
      h("td", { class: "note" }, s.note ?? "—"))));
    prev.disabled = page === 0;
    next.disabled = !nextCursor;
  };
  // A page that cannot be read says so (onError), instead of leaving the click unanswered.
  prev.addEventListener("click", () => { if (page > 0) { page--; load().catch(onError); } });
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors[page + 1] = nextCursor;
    page++;
    load().catch(onError);
  });

  const header = h("h3", {}, "Failed runs");
  const table = h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, ...["#", "Logical date", "Run", "Attempt", "Note"].map((t) => h("th", { scope: "col" }, t)))),
    body));
  const pager = h("div", { class: "actions" }, prev, next);
  const node = h("section", { id: "failed-section" }, header, count, table, pager);
  return { node, refresh: load };
}
