// One backfill's page: its fields, live progress from its event stream, the paged slot grid,
// the failed runs, its events, and the buttons that steer it (Cancel and Retry ask first; a
// group's member is steered on its group's page, which it links).
// nav.current() says whether the person is still on this page; nav.onLeave(fn) registers what
// stops its streams and timers when they leave.

import { h, show, showError } from "./dom.js";
import { API, api, token } from "./api.js";
import { TERMINAL, SLOT_STATES, count as fmt, stateBadge, progressBar, progressText } from "./format.js";
import { describeChanges } from "./changes.js";
import { fmtTime } from "./time.js";
import { confirmAction, count } from "./confirm.js";
import { failedRunsSection } from "./failed_runs.js";
import { slotGrid } from "./grid.js";

export async function backfillPage(id, nav) {
  const state = { backfill: null, eta: null, gridDirty: true };
  const title = h("h2", {}, `Backfill #${id}`);
  const fields = h("dl", { class: "fields", id: "fields" });
  const bar = h("div", { id: "progress" });
  const actions = h("div", { class: "actions" });
  const limits = h("form", { class: "form-row", id: "limits" });
  const grid = slotGrid(id, { api, h, onError: showError });
  const events = h("tbody", { id: "events" });
  const failed = failedRunsSection(id, { api, h, onError: showError });
  const legend = h("div", { class: "legend", "aria-hidden": "false" },
    ...SLOT_STATES.map((s) => h("span", {}, h("span", { class: `cell s-${s}` }), s)));

  const render = () => {
    const b = state.backfill;
    title.replaceChildren(`Backfill #${b.id} of ${b.dag_id} `, stateBadge(b.state));
    const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
    fields.replaceChildren(
      ...row("DAG", h("a", { href: `#/backfills?dag_id=${encodeURIComponent(b.dag_id)}` }, b.dag_id)),
      ...row("Window", `${fmtTime(b.from_date)} → ${fmtTime(b.to_date)}${b.run_backwards ? " (backwards)" : ""}`),
      ...row("State", b.state + (b.pause_reason ? ` (${b.pause_reason === "failure_budget" ? "failure budget reached" : "paused by a user"})` : "")),
      ...row("Reprocess", b.reprocess_behavior),
      ...row("Max active runs", fmt(b.max_active_runs)),
      ...row("Priority", String(b.priority ?? 0)),
      ...row("Max failed runs", b.max_failed_runs === null || b.max_failed_runs === undefined ? "no limit" : fmt(b.max_failed_runs)),
      ...row("Conf", b.dag_run_conf === null ? "—" : JSON.stringify(b.dag_run_conf)),
      ...row("Description", b.description ?? "—"),
      ...row("Code", b.code_ref ?? "—"),
      ...row("Created by", b.created_by ?? "—"),
      ...row("Reason", b.reason ?? "—"),
      ...(b.group_id ? row("Group", h("a", { href: `#/groups/${b.group_id}`, id: "group-link" }, `Member of group #${b.group_id}`)) : []),
      ...(b.parent_backfill_id ? row("Retry of", h("a", { href: `#/backfills/${b.parent_backfill_id}` }, `#${b.parent_backfill_id}`)) : []),
      ...row("Created", fmtTime(b.created_at)),
      ...row("Completed", fmtTime(b.completed_at)));
    bar.replaceChildren(progressBar(b.progress), h("div", { class: "progress-text", id: "progress-text" }, progressText(b, state.eta)));
    // The controls are made once and only updated here: replacing them on every progress
    // message would take the keyboard focus away from whoever is using them.
    const active = !TERMINAL.has(b.state);
    // A group's member is paused, unpaused and canceled with its group (the API answers 409
    // managed_by_group here): its own buttons give way to a link to the group.
    const member = b.group_id !== null && b.group_id !== undefined;
    controls.pause.hidden = controls.unpause.hidden = controls.cancel.hidden = member;
    managed.hidden = !member;
    if (member && !managed.firstChild) managed.replaceChildren("Paused, unpaused and canceled with its group: ",
      h("a", { href: `#/groups/${b.group_id}` }, `open group #${b.group_id}`), ".");
    controls.pause.disabled = b.state !== "running";
    controls.unpause.disabled = b.state !== "paused";
    controls.cancel.disabled = !(b.state === "running" || b.state === "paused");
    controls.retry.disabled = !(TERMINAL.has(b.state) && (b.progress.failed + b.progress.canceled) > 0);
    controls.change.disabled = !active;
    if (document.activeElement !== controls.mar) controls.mar.value = b.max_active_runs;
    if (document.activeElement !== controls.mfr) controls.mfr.value = b.max_failed_runs ?? "";
    if (document.activeElement !== controls.prio) controls.prio.value = b.priority ?? 0;
  };

  const act = (label, fn, cls) => h("button", { type: "button", class: cls, onclick: () => run(fn) }, label);
  const controls = {
    pause: act("Pause", () => api("PUT", `/backfills/${id}/pause`), "secondary"),
    unpause: act("Unpause", () => api("PUT", `/backfills/${id}/unpause`), "secondary"),
    cancel: act("Cancel", async () => {
      if (!(await confirmAction(h, cancelQuestion(state.backfill), "Cancel the runs"))) return;
      await api("PUT", `/backfills/${id}/cancel`);
    }, "danger"),
    retry: act("Retry failed slots", async () => {
      if (!(await confirmAction(h, retryQuestion(state.backfill), "Retry them"))) return;
      const { data } = await api("POST", `/backfills/${id}/retry`, { body: {} });
      location.hash = `#/backfills/${data.id}`;
    }, ""),
    mar: h("input", { type: "number", min: 1, max: 1000, id: "patch-max-active-runs" }),
    mfr: h("input", { type: "number", min: 1, placeholder: "no limit", id: "patch-max-failed-runs" }),
    prio: h("input", { type: "number", min: -10, max: 10, id: "patch-priority" }),
    change: h("button", { type: "submit", class: "secondary" }, "Change limits"),
  };
  const managed = h("p", { class: "muted", id: "managed-by-group", hidden: true });
  actions.append(controls.pause, controls.unpause, controls.cancel, controls.retry, managed);
  limits.append(
    h("label", { for: "patch-max-active-runs" }, "Max active runs", controls.mar),
    h("label", { for: "patch-max-failed-runs" }, "Max failed runs", controls.mfr),
    h("label", { for: "patch-priority" }, "Priority (−10..10)", controls.prio),
    controls.change);
  limits.addEventListener("submit", (ev) => {
    ev.preventDefault();
    run(() => api("PATCH", `/backfills/${id}`, {
      body: {
        max_active_runs: Number(controls.mar.value),
        max_failed_runs: controls.mfr.value === "" ? null : Number(controls.mfr.value),
        priority: Number(controls.prio.value),
      },
      headers: { "Content-Type": "application/merge-patch+json" },
    }));
  });

  // The ETA shown is the service's eta_seconds (the pace of the last few minutes at the
  // current limits), from this read and from the stream's progress messages: the same figure
  // the API and `backfillctl watch` show.
  const refresh = async () => {
    const { data } = await api("GET", `/backfills/${id}`);
    state.backfill = data;
    state.eta = data.eta_seconds ?? null;
    render();
  };

  // Clean before the read, not after: progress that arrives during it marks the grid again.
  const refreshGrid = async () => {
    state.gridDirty = false;
    await grid.refresh();
  };

  // A page of events does bounded work: one that looked at a stretch of the outbox without
  // finding the backfill's events answers fewer than asked (possibly none) with next_after
  // past that stretch. Read on from there until 200 are shown or the end (next_after stops
  // moving), a bounded number of pages.
  const readEvents = async () => {
    const out = [];
    let after = 0;
    for (let page = 0; page < 25 && out.length < 200; page++) {
      const { data } = await api("GET", `/backfills/${id}/events?limit=${200 - out.length}&after=${after}`);
      out.push(...data.events);
      if (data.next_after === undefined || data.next_after === after) break;
      after = data.next_after;
    }
    return out;
  };

  const refreshEvents = async () => {
    const list = await readEvents();
    const changes = describeChanges(list);
    events.replaceChildren(...list.map((e) => h("tr", { "data-type": e.type },
      h("td", {}, e.id), h("td", {}, e.type), h("td", {}, fmtTime(e.occurred_at)),
      h("td", { class: "details" }, changes.get(e.id) ?? (e.data && e.data.reason ? e.data.reason : "")))));
  };

  const run = async (fn) => {
    showError(null);
    try { await fn(); await refresh(); await refreshEvents().catch(() => {}); } catch (err) { showError(err); }
  };

  // The page is shown whole, once every section has its first read: shown section by
  // section, the grid arriving last pushed the failed runs down under the pointer of whoever
  // was about to page them (a click that landed on nothing).
  await refresh();
  if (!nav.current()) return;
  await Promise.all([refreshGrid(), refreshEvents().catch(() => {}), failed.refresh().catch(showError)]);
  if (!nav.current()) return;
  show(title, fields, h("h3", {}, "Progress"), bar, actions, limits,
    h("h3", {}, "Slots"), legend, grid.node,
    failed.node,
    h("h3", {}, "Events"), h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ...["Id", "Type", "When", "Details"].map((t) => h("th", { scope: "col" }, t)))), events)));

  // Live: the backfill's event stream; progress messages move the bar, lifecycle events
  // refresh the page. The grid follows at most once a second.
  const ctrl = new AbortController();
  const gridTimer = setInterval(() => { if (state.gridDirty) refreshGrid().catch(showError); }, 1000);
  nav.onLeave(() => { ctrl.abort(); clearInterval(gridTimer); });
  if (!TERMINAL.has(state.backfill.state)) follow(id, ctrl.signal, {
    progress: (msg) => {
      // A run that failed since belongs in the failed-runs table too, not only in the bar.
      if (msg.progress.failed !== state.backfill.progress.failed) failed.refresh().catch(() => {});
      state.backfill.progress = msg.progress;
      state.backfill.state = msg.state;
      state.eta = msg.eta_seconds;
      state.gridDirty = true;
      render();
    },
    lifecycle: () => {
      state.gridDirty = true;
      refresh().catch(showError);
      refreshEvents().catch(() => {});
      failed.refresh().catch(() => {});
    },
    fallback: () => {
      const poll = setInterval(() => { state.gridDirty = true; refresh().catch(showError); }, 2000);
      nav.onLeave(() => clearInterval(poll));
    },
  });
}

// cancelQuestion names the runs a cancel touches, from the progress the page shows: queued
// runs become canceled at once, running ones finish first.
function cancelQuestion(b) {
  const p = b.progress;
  return `Cancel ${count(p.queued + p.running)} runs of backfill ${b.id}? ` +
    `${count(p.queued)} queued become canceled now; ${count(p.running)} running finish first.`;
}

// retryQuestion names the runs a retry would run again: the failed and canceled slots.
function retryQuestion(b) {
  const p = b.progress;
  return `Retry ${count(p.failed + p.canceled)} runs of backfill ${b.id} ` +
    `(${count(p.failed)} failed, ${count(p.canceled)} canceled) in a new backfill?`;
}

// follow reads the backfill's Server-Sent Events stream with fetch (EventSource cannot send
// the Authorization header), resuming after the last event id when the connection drops.
async function follow(id, signal, on) {
  let lastID = "";
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (token()) headers.Authorization = `Bearer ${token()}`;
      if (lastID) headers["Last-Event-ID"] = lastID;
      const res = await fetch(`${API}/backfills/${id}/events`, { headers, signal });
      if (!res.ok || !(res.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        on.fallback();
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const msg = { event: "message", data: "", id: "" };
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) continue;
            const [field, ...rest] = line.split(":");
            const val = rest.join(":").replace(/^ /, "");
            if (field === "data") msg.data += (msg.data ? "\n" : "") + val;
            else if (field === "event") msg.event = val;
            else if (field === "id") msg.id = val;
          }
          if (msg.id) lastID = msg.id;
          if (!msg.data) continue;
          const data = JSON.parse(msg.data);
          if (msg.event === "progress") on.progress(data);
          else {
            on.lifecycle(data);
            if (["backfill.succeeded", "backfill.failed", "backfill.canceled"].includes(msg.event)) return;
          }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, Math.min(1000 * 2 ** attempt, 10000)));
  }
}
