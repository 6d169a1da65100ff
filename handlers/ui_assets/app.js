// The backfill console: a small single-page app over the public API (/api/v1), the same paths
// an SDK uses. No framework and no build step; every element is made with h(), never from
// HTML strings, so nothing the API returns can inject markup.

import { failedRunsSection } from "./failed_runs.js";
import { fmtTime } from "./time.js";
import { confirmAction, count } from "./confirm.js";
import { slotGrid } from "./grid.js";
import { previewSection } from "./preview.js";
import { dagsPage } from "./dags.js";

const API = "api/v1";
const TOKEN_KEY = "backfill.token";
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
const SLOT_STATES = ["queued", "running", "success", "failed", "canceled", "skipped"];

// ---- DOM -------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    // Through the CSSOM: the Content-Security-Policy forbids style attributes, not this.
    else if (k === "style") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel) => document.querySelector(sel);

function show(...nodes) {
  const view = $("#view");
  view.replaceChildren(...nodes);
}

function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = err.message || String(err);
}

// ---- API -------------------------------------------------------------------------------

class APIError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${problem.title || status}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(method, path, { body, headers = {}, raw = false } = {}) {
  const init = { method, headers: { Accept: "application/json", ...headers } };
  if (token()) init.headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    if (!init.headers["Content-Type"]) init.headers["Content-Type"] = "application/json";
  }
  let res;
  try {
    res = await fetch(`${API}${path}`, init);
  } catch (err) {
    // A refused connection or a dropped network: say so, not "TypeError".
    throw new Error(`The service cannot be reached (${err.message}). Check the connection and reload.`);
  }
  if (raw) return res;
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (res.status === 401) askForToken(data);
  if (!res.ok) throw new APIError(res.status, data);
  return { data, res };
}

function askForToken(problem) {
  const form = $("#token-form");
  form.hidden = false;
  $("#token-reason").textContent = (problem && problem.detail ? problem.detail : "This service needs an API token.") +
    (token() ? " The token you gave was refused." : "");
  $("#token-input").focus();
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token-input").value.trim());
  $("#token-input").value = "";
  $("#token-form").hidden = true;
  route();
});

// ---- Formatting ------------------------------------------------------------------------

function stateBadge(state) {
  return h("span", { class: `state state-${state || "skipped"}` }, state || "skipped");
}

function done(p) { return p.success + p.failed + p.canceled + p.skipped; }

function progressBar(p) {
  const total = Math.max(p.total, 1);
  const part = (n, cls, label) => n > 0 ? h("span", { class: cls, style: { width: `${(100 * n) / total}%` }, title: `${label} ${n}` }) : null;
  return h("div", {
    class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": p.total, "aria-valuenow": done(p),
    "aria-label": `${done(p)} of ${p.total} slots done`,
  },
  part(p.success, "b-success", "success"), part(p.failed, "b-failed", "failed"),
  part(p.canceled, "b-canceled", "canceled"), part(p.skipped, "b-skipped", "skipped"),
  part(p.running, "b-running", "running"));
}

function progressText(b, eta) {
  const p = b.progress;
  const pct = p.total ? Math.floor((100 * done(p)) / p.total) : 100;
  let text = `${done(p)}/${p.total} done (${pct}%) · success ${p.success} · failed ${p.failed} · canceled ${p.canceled} · skipped ${p.skipped} · running ${p.running} · queued ${p.queued}`;
  if (b.state === "running" && eta !== undefined && eta !== null) text += ` · ETA ${formatSeconds(eta)}`;
  if (b.state === "paused") text += " · paused, no ETA";
  return text;
}

function formatSeconds(s) {
  s = Math.round(s);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}


// ---- Router ----------------------------------------------------------------------------

let leave = () => {}; // stops the current page's streams and timers
// routeGen counts navigations. A page still loading when the person moved on must not draw
// over the page (or the error) that replaced it, nor start its streams: after each await a
// page checks that it is still current(gen).
let routeGen = 0;
const current = (gen) => gen === routeGen;

async function route() {
  leave();
  leave = () => {};
  const gen = ++routeGen;
  showError(null);
  const hash = location.hash || "#/backfills";
  const [, page, id] = hash.match(/^#\/([a-z]+)(?:\/(\d+))?/) || [];
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  try {
    if (page === "backfills" && id) await backfillPage(Number(id));
    else if (page === "create") await createPage();
    else if (page === "dags") await dagsPage({ api, h, show: (...n) => { if (current(gen)) show(...n); }, showError });
    else if (page === "pools") await poolsPage();
    else await backfillsPage();
  } catch (err) {
    if (!current(gen)) return; // a page left behind failed: not this page's error
    // Nothing of the page that was shown before stays under the banner: its figures are
    // another backfill's and its buttons would act on it.
    leave();
    leave = () => {};
    show();
    showError(err);
  }
}

window.addEventListener("hashchange", route);

// ---- Backfills -------------------------------------------------------------------------

async function backfillsPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const dagSel = h("select", { id: "filter-dag" }, h("option", { value: "" }, "all DAGs"));
  const stateSel = h("select", { id: "filter-state" }, h("option", { value: "" }, "all states"),
    ...["running", "paused", "canceling", "succeeded", "failed", "canceled"].map((s) => h("option", { value: s }, s)));
  const tbody = h("tbody");
  const summary = h("p", { class: "muted" });
  const load = async () => {
    const q = new URLSearchParams({ order_by: "-id", limit: "100" });
    if (dagSel.value) q.set("dag_id", dagSel.value);
    if (stateSel.value) q.set("state", stateSel.value);
    const { data } = await api("GET", `/backfills?${q}`);
    tbody.replaceChildren(...data.backfills.map((b) => h("tr", {},
      h("td", {}, h("a", { href: `#/backfills/${b.id}` }, `#${b.id}`)),
      h("td", {}, b.dag_id),
      h("td", {}, stateBadge(b.state)),
      h("td", {}, progressBar(b.progress), h("div", { class: "progress-text" }, `${done(b.progress)}/${b.progress.total}`)),
      h("td", {}, `${fmtTime(b.from_date)} → ${fmtTime(b.to_date)}`),
      h("td", {}, fmtTime(b.created_at)))));
    summary.textContent = `${data.backfills.length} of ${data.total_entries} backfills, newest first`;
  };
  const gen = routeGen;
  const { data: dags } = await api("GET", "/dags?limit=1000");
  if (!current(gen)) return;
  dagSel.append(...dags.dags.map((d) => h("option", { value: d.dag_id }, d.dag_id)));
  dagSel.value = params.get("dag_id") || "";
  stateSel.value = params.get("state") || "";
  dagSel.addEventListener("change", () => load().catch(showError));
  stateSel.addEventListener("change", () => load().catch(showError));
  show(
    h("h2", {}, "Backfills"),
    h("div", { class: "filters" },
      h("label", {}, "DAG", dagSel), h("label", {}, "State", stateSel),
      h("a", { href: "#/create" }, "New backfill…")),
    summary,
    h("table", {}, h("thead", {}, h("tr", {}, ...["Backfill", "DAG", "State", "Progress", "Window", "Created"].map((t) => h("th", { scope: "col" }, t)))), tbody));
  await load();
  if (!current(gen)) return;
  const timer = setInterval(() => load().catch(showError), 5000);
  leave = () => clearInterval(timer);
}

// ---- One backfill ----------------------------------------------------------------------

async function backfillPage(id) {
  const state = { backfill: null, eta: null, gridDirty: true };
  const title = h("h2", {}, `Backfill #${id}`);
  const fields = h("dl", { class: "fields", id: "fields" });
  const bar = h("div", { id: "progress" });
  const actions = h("div", { class: "actions" });
  const limits = h("form", { class: "form-row", id: "limits" });
  const grid = slotGrid(id, { api, h, onError: showError });
  const events = h("tbody", { id: "events" });
  const failed = failedRunsSection(id, { api, h });
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
      ...row("Max active runs", b.max_active_runs),
      ...row("Max failed runs", b.max_failed_runs ?? "no limit"),
      ...row("Conf", b.dag_run_conf === null ? "—" : JSON.stringify(b.dag_run_conf)),
      ...row("Description", b.description ?? "—"),
      ...(b.parent_backfill_id ? row("Retry of", h("a", { href: `#/backfills/${b.parent_backfill_id}` }, `#${b.parent_backfill_id}`)) : []),
      ...row("Created", fmtTime(b.created_at)),
      ...row("Completed", fmtTime(b.completed_at)));
    bar.replaceChildren(progressBar(b.progress), h("div", { class: "progress-text", id: "progress-text" }, progressText(b, state.eta)));
    // The controls are made once and only updated here: replacing them on every progress
    // message would take the keyboard focus away from whoever is using them.
    const active = !TERMINAL.has(b.state);
    controls.pause.disabled = b.state !== "running";
    controls.unpause.disabled = b.state !== "paused";
    controls.cancel.disabled = !(b.state === "running" || b.state === "paused");
    controls.retry.disabled = !(TERMINAL.has(b.state) && (b.progress.failed + b.progress.canceled) > 0);
    controls.change.disabled = !active;
    if (document.activeElement !== controls.mar) controls.mar.value = b.max_active_runs;
    if (document.activeElement !== controls.mfr) controls.mfr.value = b.max_failed_runs ?? "";
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
    change: h("button", { type: "submit", class: "secondary" }, "Change limits"),
  };
  actions.append(controls.pause, controls.unpause, controls.cancel, controls.retry);
  limits.append(
    h("label", { for: "patch-max-active-runs" }, "Max active runs", controls.mar),
    h("label", { for: "patch-max-failed-runs" }, "Max failed runs", controls.mfr),
    controls.change);
  limits.addEventListener("submit", (ev) => {
    ev.preventDefault();
    run(() => api("PATCH", `/backfills/${id}`, {
      body: {
        max_active_runs: Number(controls.mar.value),
        max_failed_runs: controls.mfr.value === "" ? null : Number(controls.mfr.value),
      },
      headers: { "Content-Type": "application/merge-patch+json" },
    }));
  });

  const refresh = async () => {
    const { data } = await api("GET", `/backfills/${id}`);
    state.backfill = data;
    render();
  };

  const refreshGrid = async () => {
    await grid.refresh();
    state.gridDirty = false;
  };

  const refreshEvents = async () => {
    const { data } = await api("GET", `/backfills/${id}/events?limit=200`);
    events.replaceChildren(...data.events.map((e) => h("tr", {},
      h("td", {}, e.id), h("td", {}, e.type), h("td", {}, fmtTime(e.occurred_at)),
      h("td", {}, e.data && e.data.reason ? e.data.reason : ""))));
  };

  const run = async (fn) => {
    showError(null);
    try { await fn(); await refresh(); await refreshEvents().catch(() => {}); } catch (err) { showError(err); }
  };

  const gen = routeGen;
  await refresh();
  if (!current(gen)) return;
  show(title, fields, h("h3", {}, "Progress"), bar, actions, limits,
    h("h3", {}, "Slots"), legend, grid.node,
    failed.node,
    h("h3", {}, "Events"), h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ...["Id", "Type", "When", "Reason"].map((t) => h("th", { scope: "col" }, t)))), events)));
  await Promise.all([refreshGrid(), refreshEvents().catch(() => {}), failed.refresh().catch(showError)]);
  if (!current(gen)) return;

  // Live: the backfill's event stream; progress messages move the bar, lifecycle events
  // refresh the page. The grid follows at most once a second.
  const ctrl = new AbortController();
  const gridTimer = setInterval(() => { if (state.gridDirty) refreshGrid().catch(showError); }, 1000);
  leave = () => { ctrl.abort(); clearInterval(gridTimer); };
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
      const prev = leave;
      leave = () => { prev(); clearInterval(poll); };
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

// ---- Create ----------------------------------------------------------------------------

async function createPage() {
  const gen = routeGen;
  const { data: dags } = await api("GET", "/dags?limit=1000");
  if (!current(gen)) return;
  const dag = h("select", { id: "create-dag", required: true }, ...dags.dags.map((d) => h("option", { value: d.dag_id }, `${d.dag_id} (${d.schedule}, ${d.timezone})`)));
  const from = h("input", { id: "create-from", type: "datetime-local", required: true, step: 1 });
  const to = h("input", { id: "create-to", type: "datetime-local", required: true, step: 1 });
  const mar = h("input", { id: "create-max-active-runs", type: "number", min: 1, max: 1000, value: 10 });
  const mfr = h("input", { id: "create-max-failed-runs", type: "number", min: 1, placeholder: "no limit" });
  const reprocess = h("select", { id: "create-reprocess" }, ...["none", "failed", "completed"].map((v) => h("option", { value: v }, v)));
  const backwards = h("input", { id: "create-backwards", type: "checkbox" });
  const conf = h("textarea", { id: "create-conf", placeholder: '{"full_refresh": true}' });
  const description = h("input", { id: "create-description", type: "text", maxlength: 1000 });
  const preview = h("section", { id: "preview", "aria-live": "polite" });
  const utc = (v) => (v.length === 16 ? `${v}:00Z` : `${v}Z`);

  const request = () => {
    const body = {
      dag_id: dag.value, from_date: utc(from.value), to_date: utc(to.value),
      max_active_runs: Number(mar.value), reprocess_behavior: reprocess.value, run_backwards: backwards.checked,
    };
    if (mfr.value !== "") body.max_failed_runs = Number(mfr.value);
    if (conf.value.trim() !== "") {
      try { body.dag_run_conf = JSON.parse(conf.value); } catch (err) { throw new Error(`Conf is not JSON: ${err.message}`); }
    }
    if (description.value.trim() !== "") body.description = description.value.trim();
    return body;
  };

  const form = h("form", { id: "create-form" },
    h("div", { class: "form-row" },
      h("label", { for: "create-dag" }, "DAG", dag),
      h("label", { for: "create-from" }, "From (UTC)", from),
      h("label", { for: "create-to" }, "To (UTC)", to)),
    h("div", { class: "form-row" },
      h("label", { for: "create-max-active-runs" }, "Max active runs", mar),
      h("label", { for: "create-max-failed-runs" }, "Max failed runs", mfr),
      h("label", { for: "create-reprocess" }, "Reprocess", reprocess),
      h("label", { class: "check", for: "create-backwards" }, backwards, "Run backwards")),
    h("div", { class: "form-row" },
      h("label", { for: "create-conf" }, "dag_run_conf (JSON)", conf),
      h("label", { for: "create-description" }, "Description", description)),
    h("div", { class: "actions" }, h("button", { type: "submit", id: "preview-button" }, "Preview")));

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    showError(null);
    try {
      const body = request();
      const { data, res } = await api("POST", "/backfills/dry_run", { body });
      const etag = res.headers.get("ETag") || (data.plan_hash ? `"${data.plan_hash}"` : "*");
      const create = async () => {
        showError(null);
        try {
          const { data: b } = await api("POST", "/backfills", { body, headers: { "If-Match": etag } });
          location.hash = `#/backfills/${b.id}`;
        } catch (err) {
          showError(err.problem && err.problem.code === "plan_changed"
            ? new Error("The plan changed since this preview (a run or the schedule changed): preview again.") : err);
        }
      };
      preview.replaceChildren(...previewSection(data, etag, create, { h }));
    } catch (err) {
      showError(err);
    }
  });
  show(h("h2", {}, "New backfill"), dags.dags.length ? form : h("p", {}, "No DAG yet: ", h("a", { href: "#/dags" }, "create one"), " first."), preview);
}

// ---- Pools -----------------------------------------------------------------------------

// poolsPage lists pools with their slots, running and queued runs, read again every 2 s
// while the page is shown (a pool's figures move with every claim and report).
async function poolsPage() {
  const gen = routeGen;
  const draw = async () => {
    const { data } = await api("GET", "/pools?limit=1000");
    if (!current(gen)) return;
    show(h("h2", {}, "Pools"),
      data.pools.length === 0
        ? h("p", {}, "No pool yet: create one with PUT /api/v1/pools/{name} or backfillctl pools put.")
        : h("table", { id: "pools" },
          h("thead", {}, h("tr", {}, ...["Pool", "Slots", "Running", "Queued", "In use", "Description"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, ...data.pools.map((p) => h("tr", { "data-pool": p.name },
            h("td", {}, p.name), h("td", { class: "slots" }, p.slots), h("td", { class: "running" }, p.running),
            h("td", { class: "queued" }, p.queued), h("td", {}, poolBar(p)), h("td", {}, p.description ?? ""))))));
  };
  await draw();
  if (!current(gen)) return;
  const timer = setInterval(() => draw().catch(showError), 2000);
  leave = () => clearInterval(timer);
}

// poolBar shows running runs against slots; a pool above its slots (they were lowered) is full.
function poolBar(p) {
  const width = `${Math.min(100, (100 * p.running) / p.slots)}%`;
  return h("div", { class: "bar", role: "img", "aria-label": `${p.running} of ${p.slots} slots in use` },
    h("span", { class: "b-running", style: { width } }));
}

route();
