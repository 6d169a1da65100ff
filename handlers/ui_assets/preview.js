// The create page's preview of a dry run: counts by action, a warning when nothing would run,
// and the planned slots 100 rows at a time (a 43,848-slot plan is 439 pages, not 43,848 rows).

import { fmtTime } from "./time.js";
import { count } from "./confirm.js";
import { formatSeconds } from "./format.js";

const ROWS = 100;

// previewSection renders the dry run's answer; onCreate is called by the Create button,
// which is disabled when every slot would be skipped.
export function previewSection(data, etag, onCreate, { h }) {
  const counts = { create: 0, reprocess: 0, skip: 0 };
  for (const r of data.runs) counts[r.action]++;
  const nothing = data.total_entries === 0 || counts.create + counts.reprocess === 0;
  const createBtn = h("button", { type: "button", id: "create-button", disabled: nothing }, "Create this backfill");
  createBtn.addEventListener("click", onCreate);

  let warning = null;
  if (data.total_entries === 0) {
    warning = h("p", { class: "warning", id: "preview-warning", role: "status" }, "Nothing would run: the window has no slot of this schedule.");
  } else if (nothing) {
    const reasons = {};
    for (const r of data.runs) reasons[r.exception_reason] = (reasons[r.exception_reason] || 0) + 1;
    const exist = reasons["already exists"] || 0;
    const inFlight = reasons["in flight"] || 0;
    warning = h("p", { class: "warning", id: "preview-warning", role: "status" },
      `Nothing would run: all ${count(data.total_entries)} slots are skipped (already existing: ${count(exist)}, in flight: ${count(inFlight)}). `,
      "Runs that already exist are included with Reprocess (", h("code", {}, "reprocess_behavior"),
      ") set to failed or completed; preview again after changing it.",
      inFlight > 0 ? " Runs in flight (queued or running now) cannot be included until they end." : "");
  }

  const body = h("tbody", { id: "preview-rows" });
  const range = h("span", { class: "muted", id: "preview-range" });
  const prev = h("button", { type: "button", class: "secondary", id: "preview-prev" }, "Previous");
  const next = h("button", { type: "button", class: "secondary", id: "preview-next" }, "Next");
  let page = 0;
  const draw = () => {
    const rows = data.runs.slice(page * ROWS, (page + 1) * ROWS);
    body.replaceChildren(...rows.map((r) => h("tr", {},
      h("td", {}, count(r.sort_ordinal)), h("td", {}, fmtTime(r.logical_date)), h("td", {}, r.action), h("td", {}, r.exception_reason ?? ""))));
    range.textContent = rows.length === 0 ? "" : `Slots ${count(page * ROWS + 1)}–${count(page * ROWS + rows.length)} of ${count(data.runs.length)}`;
    prev.disabled = page === 0;
    next.disabled = (page + 1) * ROWS >= data.runs.length;
  };
  prev.addEventListener("click", () => { page--; draw(); });
  next.addEventListener("click", () => { page++; draw(); });
  draw();

  return [
    h("h3", {}, "Preview"),
    h("div", { class: "counts" },
      h("div", { id: "count-total" }, h("strong", {}, count(data.total_entries)), "slots"),
      h("div", { id: "count-create" }, h("strong", {}, count(counts.create)), "create"),
      h("div", { id: "count-reprocess" }, h("strong", {}, count(counts.reprocess)), "reprocess"),
      h("div", { id: "count-skip" }, h("strong", {}, count(counts.skip)), "skip")),
    warning,
    estimateLine(data, { h }),
    h("p", { class: "muted" }, `Created only if the plan is still this one (If-Match: ${etag}).`),
    createBtn,
    h("div", { class: "pager" }, prev, range, next),
    h("table", {},
      h("thead", {}, h("tr", {}, ...["#", "Logical date", "Action", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
      body),
  ].filter(Boolean);
}

// estimateLine is the dry run's estimate: runner-seconds (the p50 of the DAG's last successful
// runs times the runs to start) and wall-clock at the concurrency the backfill would have, or
// why there is none.
export function estimateLine(data, { h }) {
  const e = data.estimate;
  if (!e) {
    const why = data.estimate_basis === "no_successful_runs"
      ? "no estimate: the DAG has no successful run to measure"
      : `no estimate (${data.estimate_basis ?? "unknown basis"})`;
    return h("p", { class: "muted", id: "preview-estimate", "data-basis": data.estimate_basis ?? "" }, why);
  }
  return h("p", { id: "preview-estimate", "data-basis": data.estimate_basis,
    "data-runner-seconds": e.runner_seconds, "data-wall-clock-seconds": e.wall_clock_seconds },
  `Estimate: ${formatSeconds(e.runner_seconds)} of runner time, about ${formatSeconds(e.wall_clock_seconds)} wall-clock `,
  `at ${count(e.concurrency)} at once (${count(e.runs)} runs × p50 ${formatSeconds(e.p50_run_seconds)} of the DAG's last ${count(e.sample_runs)} successful runs).`);
}
