// How a backfill's (or a backfill group's) state and progress are drawn, in the lists and on
// their own pages.

import { h } from "./dom.js";

// count writes a number with thousands separators ("43,801"), the same in every locale; every
// number the console shows goes through it.
export const count = (n) => (n === null || n === undefined || n === "" ? "" : Number(n).toLocaleString("en-US"));

export const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
export const SLOT_STATES = ["queued", "running", "success", "failed", "canceled", "skipped"];

export function stateBadge(state) {
  return h("span", { class: `state state-${state || "skipped"}` }, state || "skipped");
}

export function done(p) { return p.success + p.failed + p.canceled + p.skipped; }

export function progressBar(p) {
  const total = Math.max(p.total, 1);
  const part = (n, cls, label) => n > 0 ? h("span", { class: cls, style: { width: `${(100 * n) / total}%` }, title: `${label} ${count(n)}` }) : null;
  return h("div", {
    class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": p.total, "aria-valuenow": done(p),
    "aria-label": `${count(done(p))} of ${count(p.total)} slots done` + (p.blocked > 0 ? `, ${count(p.blocked)} blocked` : ""),
  },
  part(p.success, "b-success", "success"), part(p.failed, "b-failed", "failed"),
  part(p.canceled, "b-canceled", "canceled"), part(p.skipped, "b-skipped", "skipped"),
  part(p.running, "b-running", "running"), part(p.blocked, "b-blocked", "blocked"));
}

export function progressText(b, eta) {
  const p = b.progress;
  const pct = p.total ? Math.floor((100 * done(p)) / p.total) : 100;
  let text = `${count(done(p))}/${count(p.total)} done (${pct}%) · success ${count(p.success)} · failed ${count(p.failed)} · canceled ${count(p.canceled)} · skipped ${count(p.skipped)} · running ${count(p.running)} · queued ${count(p.queued)}`;
  // Blocked runs (a group's member's, waiting for an upstream run) are queued runs too.
  if (p.blocked > 0) text += ` (blocked ${count(p.blocked)})`;
  if (b.state === "running" && eta !== undefined && eta !== null) text += ` · ETA ${formatSeconds(eta)}`;
  if (b.state === "paused") text += " · paused, no ETA";
  return text;
}

export function formatSeconds(s) {
  s = Math.round(s);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

