// The slot grid of one backfill, a page of 1,000 slots at a time (one read of the slot
// listing, following its next_cursor), so that a 43,848-slot backfill is seen whole, page by
// page, at the cost of its first page. Each cell's hover comes from the same listing: date,
// state, run, attempt, note or skip reason.
//
// The page shown is one record, `shown`, drawn from one answer: the range label, the cells and
// the buttons all come from it, so they cannot disagree. A click asks for a page relative to
// `shown` (never to a page still being read), and only the latest request may draw.

import { fmtTime } from "./time.js";
import { count } from "./confirm.js";

export const GRID_PAGE = 1000;

export function slotGrid(id, { api, h, onError }) {
  const grid = h("div", { class: "grid", id: "grid", role: "list", "aria-label": "Slots by state" });
  const range = h("span", { id: "grid-range", class: "muted" });
  const note = h("span", { id: "grid-note", class: "muted", role: "status" });
  const button = (bid, label) => h("button", { type: "button", class: "secondary", id: bid }, label);
  const first = button("grid-first", "First");
  const prev = button("grid-prev", "Previous");
  const next = button("grid-next", "Next");
  const active = button("grid-active", "Jump to first running or queued");

  // cursors[i] starts page i (null: the first page). Slots are never inserted into a
  // backfill, so a page's cursor keeps naming the same slots while the page is refreshed.
  // A page reached by a jump has no cursor yet: it is read once by offset.
  const cursors = [null];
  // shown: the page on screen ({ page, next, last }), or null before the first answer.
  let shown = null;
  // wanted: the page the latest navigation asked for; a refresh re-reads it.
  let wanted = 0;
  // seq numbers every request; an answer draws only if no request was made after it, so a
  // slow answer for the page before never lands under this page's label.
  let seq = 0;
  // busy: a navigation is being read; the buttons wait for it instead of stacking clicks.
  let busy = false;
  // A refresh asked for while a read is in flight waits for it (once), so a stream of
  // refreshes slower than their interval cannot starve every answer of drawing.
  let inflight = null;
  let again = false;
  // highlight: the ordinal the jump went to, outlined until another jump.
  let highlight = null;

  const cell = (s) => {
    const st = s.state || "skipped";
    const tip = [`#${count(s.sort_ordinal)} ${fmtTime(s.logical_date)}`, `state: ${st}`];
    if (s.run_id) tip.push(`run: ${s.run_id}`);
    if (s.run_id && s.attempt != null) tip.push(`attempt: ${s.attempt}`);
    if (s.note) tip.push(`note: ${s.note}`);
    if (s.exception_reason) tip.push(`skipped: ${s.exception_reason}`);
    const text = tip.join("\n");
    const cls = `cell s-${st}` + (s.sort_ordinal === highlight ? " target" : "");
    return h("span", {
      class: cls, title: text, "aria-label": text, role: "listitem", tabindex: 0,
      "data-state": st, "data-ordinal": s.sort_ordinal,
    });
  };

  const buttons = () => {
    const at = shown ? shown.page : 0;
    first.disabled = prev.disabled = busy || at === 0;
    next.disabled = busy || !shown || shown.last;
    active.disabled = busy;
  };

  // read fetches page p and draws it if it is still the latest request.
  const read = async (p) => {
    const mine = ++seq;
    const c = cursors[p];
    let q = `limit=${GRID_PAGE}`;
    if (c) q += `&cursor=${encodeURIComponent(c)}`;
    else if (p > 0) q += `&offset=${p * GRID_PAGE}`;
    const { data } = await api("GET", `/backfills/${id}/dag_runs?${q}`);
    if (mine !== seq) return;
    const slots = data.backfill_dag_runs;
    const a = p * GRID_PAGE + 1;
    const z = a + slots.length - 1;
    // The last page: no cursor onward, or the page reaches the total (a full last page).
    const last = !data.next_cursor || z >= data.total_entries;
    if (data.next_cursor) cursors[p + 1] = data.next_cursor;
    shown = { page: p, last };
    grid.replaceChildren(...slots.map(cell));
    range.textContent = slots.length === 0 ? "No slots."
      : `Slots ${count(a)}–${count(z)} of ${count(data.total_entries)}`;
    grid.dataset.page = String(p);
  };

  // refresh re-reads the wanted page; calls made while it reads are folded into one more read.
  const refresh = () => {
    if (inflight) { again = true; return inflight; }
    const loop = async () => {
      do { again = false; await read(wanted); } while (again);
    };
    inflight = loop().finally(() => { inflight = null; });
    return inflight;
  };

  // go shows page p: a request that supersedes every one before it.
  const go = async (p) => {
    wanted = p;
    busy = true;
    buttons();
    try {
      await read(p);
    } catch (err) {
      onError(err);
    } finally {
      busy = false;
      buttons();
    }
  };

  first.addEventListener("click", () => { if (!busy) go(0); });
  prev.addEventListener("click", () => { if (!busy && shown && shown.page > 0) go(shown.page - 1); });
  next.addEventListener("click", () => { if (!busy && shown && !shown.last) go(shown.page + 1); });
  active.addEventListener("click", () => { if (!busy) jumpToActive().catch(onError); });

  // jumpToActive shows the page of the first slot, in listing order, that is running or
  // queued. Slots are numbered 1..total in that order, so the ordinal gives the page.
  const jumpToActive = async () => {
    const firstOf = async (state) => {
      const { data } = await api("GET", `/backfills/${id}/dag_runs?state=${state}&limit=1`);
      return data.backfill_dag_runs.length ? data.backfill_dag_runs[0].sort_ordinal : Infinity;
    };
    const [r, q] = await Promise.all([firstOf("running"), firstOf("queued")]);
    const ord = Math.min(r, q);
    note.textContent = ord === Infinity ? "No slot is running or queued." : "";
    if (ord === Infinity) return;
    highlight = ord;
    await go(Math.floor((ord - 1) / GRID_PAGE));
    const target = grid.querySelector(`.cell[data-ordinal="${ord}"]`);
    if (target) target.focus();
  };

  const load = async () => { await refresh(); buttons(); };
  const pager = h("div", { class: "pager", id: "grid-pager" }, first, prev, range, next, active, note);
  return { node: h("div", {}, pager, grid), refresh: load };
}
