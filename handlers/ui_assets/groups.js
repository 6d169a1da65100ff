// Backfill groups: the list of groups, and one group's page with its member backfills by
// depth (the order their runs wait for each other), their progress including the runs still
// blocked on an upstream, and the buttons that steer the whole group (each asks first: it acts
// on every member). A member is paused, unpaused and canceled only with its group; its own
// page links here. Groups have no event stream: both pages read again every 2 s while shown
// and the group is active, redrawing only what changes, and only the latest read draws.

import { h, show, showError } from "./dom.js";
import { api } from "./api.js";
import { TERMINAL, count, done, progressBar, progressText, stateBadge } from "./format.js";
import { fmtTime } from "./time.js";
import { confirmAction } from "./confirm.js";

const STATES = ["running", "paused", "canceling", "succeeded", "failed", "canceled"];
const PAGE = 50;
const EVERY = 2000;

// targetsText names what was asked for: the target DAGs and which downstreams joined them.
const targetsText = (g) => g.dag_ids.join(", ") +
  (g.include_downstream === "none" ? "" : ` + downstream (${g.include_downstream})`);

const windowText = (g) => `${fmtTime(g.from_date)} → ${fmtTime(g.to_date)}${g.run_backwards ? " (backwards)" : ""}`;

// countsText is a progress in one line: done/total, then the blocked runs (queued runs that
// still wait for another run; they count as queued too).
const countsText = (p) => `${count(done(p))}/${count(p.total)} done · blocked ${count(p.blocked)}`;

// byDepth orders members as their runs wait for each other: by depth, then dag_id (the API's
// order; sorted again so the page does not depend on it).
// redraw replaces node's children with build() only when key differs from the last drawn:
// a read every 2 s that changed nothing leaves the links where they are, with the focus.
const drawn = new WeakMap(); // node → the key of what it shows
function redraw(node, key, build) {
  if (drawn.get(node) === key) return;
  drawn.set(node, key);
  node.replaceChildren(...build());
}

const byDepth = (members) => [...members].sort((a, b) => a.depth - b.depth || (a.dag_id < b.dag_id ? -1 : a.dag_id > b.dag_id ? 1 : 0));

// ---- The list --------------------------------------------------------------------------

// groupsPage lists groups by id (the API's order), filterable by state and by a member's DAG,
// 50 a page through the listing's cursors.
export async function groupsPage(nav) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const dagSel = h("select", { id: "groups-filter-dag" }, h("option", { value: "" }, "all DAGs"));
  const stateSel = h("select", { id: "groups-filter-state" }, h("option", { value: "" }, "all states"),
    ...STATES.map((s) => h("option", { value: s }, s)));
  const tbody = h("tbody", { id: "groups" });
  const summary = h("p", { class: "muted", id: "groups-summary" });
  const prev = h("button", { type: "button", class: "secondary", id: "groups-prev" }, "Previous page");
  const next = h("button", { type: "button", class: "secondary", id: "groups-next" }, "Next page");
  const cursors = [null]; // cursors[i] starts page i
  let page = 0;
  let nextCursor = null;
  let reads = 0;

  const load = async () => {
    const read = ++reads;
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (dagSel.value) q.set("dag_id", dagSel.value);
    if (stateSel.value) q.set("state", stateSel.value);
    if (cursors[page]) q.set("cursor", cursors[page]);
    const { data } = await api("GET", `/backfill_groups?${q}`);
    if (read !== reads || !nav.current()) return;
    nextCursor = data.next_cursor;
    redraw(tbody, JSON.stringify(data.backfill_groups), () => data.backfill_groups.map((g) => h("tr", { "data-group": g.id },
      h("td", {}, h("a", { href: `#/groups/${g.id}` }, `#${g.id}`)),
      h("td", { class: "targets" }, targetsText(g), h("div", { class: "progress-text" }, `${count(g.members.length)} member backfills`)),
      h("td", {}, stateBadge(g.state)),
      h("td", {}, progressBar(g.progress), h("div", { class: "progress-text" }, countsText(g.progress))),
      h("td", {}, windowText(g)),
      h("td", { class: "created-by" }, g.created_by ?? "—", h("div", { class: "progress-text" }, g.reason ?? "")),
      h("td", {}, fmtTime(g.created_at)))));
    const first = page * PAGE + 1;
    summary.textContent = data.total_entries === 0 ? "No backfill group yet."
      : `Groups ${count(first)}–${count(first + data.backfill_groups.length - 1)} of ${count(data.total_entries)}, oldest first`;
    prev.disabled = page === 0;
    next.disabled = !nextCursor;
  };
  const restart = () => { cursors.length = 1; page = 0; load().catch(showError); };
  prev.addEventListener("click", () => { if (page > 0) { page--; load().catch(showError); } });
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors[page + 1] = nextCursor;
    page++;
    load().catch(showError);
  });

  const { data: dags } = await api("GET", "/dags?limit=1000");
  if (!nav.current()) return;
  dagSel.append(...dags.dags.map((d) => h("option", { value: d.dag_id }, d.dag_id)));
  dagSel.value = params.get("dag_id") || "";
  stateSel.value = params.get("state") || "";
  dagSel.addEventListener("change", restart);
  stateSel.addEventListener("change", restart);
  await load();
  if (!nav.current()) return;
  show(
    h("h2", {}, "Backfill groups"),
    h("p", { class: "muted" }, "A group backfills several DAGs over one window; each run waits for the runs it depends on. Create one with POST /api/v1/backfill_groups or backfillctl groups create."),
    h("div", { class: "filters" },
      h("label", { for: "groups-filter-dag" }, "Member DAG", dagSel), h("label", { for: "groups-filter-state" }, "State", stateSel)),
    summary,
    h("table", {}, h("thead", {}, h("tr", {}, ...["Group", "Targets", "State", "Progress", "Window", "Created by / reason", "Created"].map((t) => h("th", { scope: "col" }, t)))), tbody),
    h("div", { class: "actions pager" }, prev, next));
  const timer = setInterval(() => load().catch(showError), EVERY);
  nav.onLeave(() => clearInterval(timer));
}

// ---- One group -------------------------------------------------------------------------

export async function groupPage(id, nav) {
  let group = null;
  let reads = 0; // only the latest read (or action's answer) draws
  const title = h("h2", {}, `Backfill group #${id}`);
  const fields = h("dl", { class: "fields", id: "group-fields" });
  const bar = h("div", { id: "group-progress" });
  const members = h("tbody", { id: "members" });
  const updated = h("p", { class: "muted", id: "group-updated" });

  const draw = (g) => {
    group = g;
    title.replaceChildren(`Backfill group #${g.id} `, stateBadge(g.state));
    const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
    fields.replaceChildren(
      ...row("Targets", targetsText(g)),
      ...row("Window", windowText(g)),
      ...row("State", g.state + (g.pause_reason ? ` (${g.pause_reason === "failure_budget" ? "failure budget reached" : "paused by a user"})` : "")),
      ...row("Reprocess", g.reprocess_behavior),
      ...row("Max active runs", `${count(g.max_active_runs)} per member`),
      ...row("Max failed runs", g.max_failed_runs === null || g.max_failed_runs === undefined ? "no limit" : `${count(g.max_failed_runs)}, all members together`),
      ...row("Priority", String(g.priority ?? 0)),
      ...row("Pool", g.pool ?? "—"),
      ...row("Dependencies", `${count(g.dependencies)} run-to-run`),
      ...row("Description", g.description ?? "—"),
      ...row("Code", g.code_ref ?? "—"),
      ...row("Created by", g.created_by ?? "—"),
      ...row("Reason", g.reason ?? "—"),
      ...row("Created", fmtTime(g.created_at)),
      ...row("Completed", fmtTime(g.completed_at)));
    bar.replaceChildren(progressBar(g.progress), h("div", { class: "progress-text", id: "group-progress-text" }, progressText(g)));
    let depth = -1;
    redraw(members, JSON.stringify(g.members), () => byDepth(g.members).map((m) => {
      const first = m.depth !== depth;
      depth = m.depth;
      return h("tr", { "data-dag": m.dag_id, "data-depth": m.depth, "data-backfill": m.backfill_id, class: first ? "depth-start" : "" },
        h("td", { class: "depth" }, count(m.depth)),
        h("td", { class: "dag", style: { paddingLeft: `${0.6 + 1.4 * m.depth}rem` } },
          m.depth > 0 ? h("span", { "aria-hidden": "true", class: "muted" }, "↳ ") : null, m.dag_id),
        h("td", {}, h("a", { href: `#/backfills/${m.backfill_id}`, class: "member-link" }, `Backfill #${m.backfill_id}`)),
        h("td", { class: "state-cell" }, stateBadge(m.state)),
        h("td", { class: "progress" }, progressBar(m.progress),
          h("div", { class: "progress-text" }, progressText({ state: m.state, progress: m.progress }))),
        h("td", { class: "blocked" }, count(m.progress.blocked)));
    }));
    // The controls are made once and only updated here, so a redraw keeps the focus.
    controls.pause.disabled = g.state !== "running";
    controls.unpause.disabled = g.state !== "paused";
    controls.cancel.disabled = !(g.state === "running" || g.state === "paused");
  };

  const refresh = async () => {
    const read = ++reads;
    const { data } = await api("GET", `/backfill_groups/${id}`);
    if (read !== reads || !nav.current()) return;
    draw(data);
    updated.textContent = TERMINAL.has(data.state) ? `Finished; read at ${new Date().toISOString().slice(11, 19)} UTC.`
      : `Live: read every 2 s; last read ${new Date().toISOString().slice(11, 19)} UTC.`;
  };

  // act asks, then PUTs the action and draws the group it answers.
  const act = (label, path, question, yes, cls) => h("button", { type: "button", class: cls, onclick: async () => {
    showError(null);
    try {
      if (!(await confirmAction(h, question(group), yes))) return;
      const read = ++reads;
      const { data } = await api("PUT", `/backfill_groups/${id}/${path}`);
      if (read === reads && nav.current()) draw(data);
    } catch (err) {
      showError(err);
    }
  } }, label);
  const controls = {
    pause: act("Pause", "pause", pauseQuestion, "Pause the group", "secondary"),
    unpause: act("Unpause", "unpause", unpauseQuestion, "Unpause the group", "secondary"),
    cancel: act("Cancel", "cancel", cancelQuestion, "Cancel the runs", "danger"),
  };

  await refresh();
  if (!nav.current()) return;
  // The members come before the settings: they are what a person watching a group follows.
  show(title, updated, bar,
    h("div", { class: "actions", id: "group-actions" }, controls.pause, controls.unpause, controls.cancel),
    h("h3", {}, "Members, by depth"),
    h("p", { class: "muted" }, "Depth 0 has no upstream in the group; the runs of each other member wait for those of the members above it. Blocked runs are queued runs still waiting for an upstream run."),
    h("table", { id: "members-table" },
      h("thead", {}, h("tr", {}, ...["Depth", "DAG", "Backfill", "State", "Progress", "Blocked"].map((t) => h("th", { scope: "col" }, t)))),
      members),
    h("h3", {}, "Settings"), fields);
  const timer = setInterval(() => {
    if (group && TERMINAL.has(group.state)) return;
    refresh().catch(showError);
  }, EVERY);
  nav.onLeave(() => clearInterval(timer));
}

// The questions name what each action touches, from the progress the page shows.
const membersIn = (g, state) => g.members.filter((m) => m.state === state).length;

function pauseQuestion(g) {
  return `Pause group ${g.id} and its ${count(membersIn(g, "running"))} running member backfills? ` +
    `No run of theirs is handed out until the group is unpaused; ${count(g.progress.running)} running finish first.`;
}

function unpauseQuestion(g) {
  const p = g.progress;
  return `Unpause group ${g.id} and its ${count(membersIn(g, "paused"))} paused member backfills? ` +
    `${count(p.queued - p.blocked)} queued runs can be claimed again; ${count(p.blocked)} blocked wait for their upstream runs.`;
}

function cancelQuestion(g) {
  const p = g.progress;
  return `Cancel ${count(p.queued + p.running)} runs of group ${g.id} (${count(g.members.length)} member backfills)? ` +
    `${count(p.queued)} queued (${count(p.blocked)} of them blocked) become canceled now; ${count(p.running)} running finish first.`;
}
