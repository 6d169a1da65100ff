// What a backfill.updated event changed, for the events table. The event carries the backfill
// as it was right after the change (data.backfill). Prior values are used when the payload
// has them (data.previous: the changed fields as they were); otherwise the snapshot is
// compared with the snapshot of the event before it that this page has seen. The settings
// compared are those a backfill.updated is written for.

import { count } from "./format.js";

export const SETTINGS = ["max_active_runs", "max_failed_runs", "description", "pool", "priority"];

const show = (k, v) => {
  if (v === null || v === undefined) return k === "max_failed_runs" ? "no limit" : "none";
  return typeof v === "number" ? count(v) : JSON.stringify(v);
};

// describeChanges answers, for events in id order, a map from event id to its text: the
// fields that changed ("max_active_runs: 10 → 3"), or why they cannot be told.
export function describeChanges(events) {
  const out = new Map();
  let before = null; // the latest snapshot seen, from any event
  for (const e of events) {
    const snap = e.data && e.data.backfill;
    if (e.type === "backfill.updated") {
      const prior = e.data && e.data.previous;
      const from = prior || before;
      if (!snap || !from) {
        out.set(e.id, "settings changed (no earlier snapshot on this page to compare with)");
      } else {
        const diff = SETTINGS.filter((k) => (prior ? k in prior : true) && JSON.stringify(from[k] ?? null) !== JSON.stringify(snap[k] ?? null))
          .map((k) => `${k}: ${show(k, from[k])} → ${show(k, snap[k])}`);
        out.set(e.id, diff.length ? diff.join("; ") : "no setting changed");
      }
    }
    if (snap) before = snap;
  }
  return out;
}
