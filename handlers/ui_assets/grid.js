// The slot grid of one backfill, a page of 1,000 slots at a time (one read of the slot
// listing, following its next_cursor), so that a 43,848-slot backfill is seen whole, page by
// page, at the cost of its first page. Each cell's hover comes from the same listing: date,
// state, run, attempt, note or skip reason.

import { fmtTime } from "./time.js";
import { count } from "./confirm.js";

export const GRID_PAGE = 1000;

export function slotGrid(id, { api, h, onError }) {
  const grid = h("div", { class: "grid", id: "grid", role: "list", "aria-label": "Slots by state" });
  const range = h("span", { id: "grid-range", class: "muted" });
  const first = h("button", { type: "button", class: "secondary", id: "grid-first" }, "First");
  const prev = h("button", { type: "button", class: "secondary", id: "grid-prev" }, "Previous");
  const next = h("button", { type: "button", class: "secondary", id: "grid-next" }, "Next");
  // cursors[i] starts page i (null: the first page). Slots are never inserted into a
  // backfill, so a page's cursor keeps naming the same slots while the page is refreshed.
  const cursors = [null];
  let page = 0;
  let nextCursor = null;
  // A refresh (live progress) and a click can both be reading: only the latest read draws,
  // or a slow read of the page before would be drawn under this page's range.
  let reads = 0;

  const cell = (s) => {
    const st = s.state || "skipped";
    const tip = [`#${s.sort_ordinal} ${fmtTime(s.logical_date)}`, `state: ${st}`];
    if (s.run_id) tip.push(`run: ${s.run_id}`);
    if (s.run_id && s.attempt != null) tip.push(`attempt: ${s.attempt}`);
    if (s.note) tip.push(`note: ${s.note}`);
    if (s.exception_reason) tip.push(`skipped: ${s.exception_reason}`);
    const text = tip.join("\n");
    return h("span", {
      class: `cell s-${st}`, title: text, "aria-label": text, role: "listitem", tabindex: 0,
      "data-state": st, "data-ordinal": s.sort_ordinal,
    });
  };

  const load = async () => {
    const read = ++reads;
    const c = cursors[page];
    const q = `limit=${GRID_PAGE}` + (c ? `&cursor=${encodeURIComponent(c)}` : "");
    const { data } = await api("GET", `/backfills/${id}/dag_runs?${q}`);
    if (read !== reads) return;
    nextCursor = data.next_cursor;
    const slots = data.backfill_dag_runs;
    grid.replaceChildren(...slots.map(cell));
    const a = page * GRID_PAGE + 1;
    range.textContent = slots.length === 0 ? "No slots."
      : `Slots ${count(a)}–${count(a + slots.length - 1)} of ${count(data.total_entries)}`;
    first.disabled = prev.disabled = page === 0;
    next.disabled = !nextCursor;
  };
  const go = (p) => { page = p; load().catch(onError); };
  first.addEventListener("click", () => go(0));
  prev.addEventListener("click", () => { if (page > 0) go(page - 1); });
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors[page + 1] = nextCursor;
    go(page + 1);
  });

  const pager = h("div", { class: "pager", id: "grid-pager" }, first, prev, range, next);
  return { node: h("div", {}, pager, grid), refresh: load };
}
