// The backfill console: a small single-page app over the public API (/api/v1), the same paths
// an SDK uses. No framework and no build step; every element is made with h(), never from
// HTML strings, so nothing the API returns can inject markup.

import { h, $, show, showError } from "./dom.js";
import { TOKEN_KEY, api } from "./api.js";
import { count, done, progressBar, stateBadge } from "./format.js";
import { dateInput, isoUTC } from "./dates.js";
import { fmtTime } from "./time.js";
import { backfillPage } from "./backfill.js";
import { previewSection } from "./preview.js";
import { dagsPage } from "./dags.js";
import { groupPage, groupsPage } from "./groups.js";

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token-input").value.trim());
  $("#token-input").value = "";
  $("#token-form").hidden = true;
  route();
});

// ---- Router ----------------------------------------------------------------------------

let leave = () => {}; // stops the current page's streams and timers
// routeGen counts navigations. A page still loading when the person moved on must not draw
// over the page (or the error) that replaced it, nor start its streams: after each await a
// page checks that it is still current(gen).
let routeGen = 0;
const current = (gen) => gen === routeGen;

// nav is what a page started by navigation gen needs: whether it is still shown, and a way to
// have its streams and timers stopped when it is not (at once, if it was already left).
function nav(gen) {
  return {
    current: () => current(gen),
    onLeave: (stop) => {
      if (!current(gen)) { stop(); return; }
      const prev = leave;
      leave = () => { prev(); stop(); };
    },
  };
}

async function route() {
  leave();
  leave = () => {};
  const gen = ++routeGen;
  showError(null);
  const hash = location.hash || "#/backfills";
  const [, page, id] = hash.match(/^#\/([a-z]+)(?:\/([^/?]*))?/) || [];
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  try {
    // A backfill address whose id is not a number names no backfill: an error, not the list.
    if (page === "backfills" && id !== undefined && !/^[1-9]\d{0,18}$/.test(id)) {
      throw new Error(`No backfill "${decodeURIComponent(id)}": a backfill id is a positive number (#/backfills/42).`);
    }
    if (page === "groups" && id && !/^[1-9]\d{0,18}$/.test(id)) {
      throw new Error(`No backfill group "${decodeURIComponent(id)}": a group id is a positive number (#/groups/7).`);
    }
    if (page === "backfills" && id) await backfillPage(Number(id), nav(gen));
    else if (page === "groups" && id) await groupPage(Number(id), nav(gen));
    else if (page === "groups") await groupsPage(nav(gen));
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
      h("td", {}, progressBar(b.progress), h("div", { class: "progress-text" }, `${count(done(b.progress))}/${count(b.progress.total)}`)),
      h("td", {}, `${fmtTime(b.from_date)} → ${fmtTime(b.to_date)}`),
      h("td", {}, fmtTime(b.created_at)))));
    summary.textContent = `${count(data.backfills.length)} of ${count(data.total_entries)} backfills, newest first`;
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


// ---- Create ----------------------------------------------------------------------------

async function createPage() {
  const gen = routeGen;
  const { data: dags } = await api("GET", "/dags?limit=1000");
  if (!current(gen)) return;
  const dag = h("select", { id: "create-dag", required: true }, ...dags.dags.map((d) => h("option", { value: d.dag_id }, `${d.dag_id} (${d.schedule}, ${d.timezone})`)));
  const from = dateInput(h, "create-from");
  const to = dateInput(h, "create-to");
  const mar = h("input", { id: "create-max-active-runs", type: "number", min: 1, max: 1000, value: 10 });
  const mfr = h("input", { id: "create-max-failed-runs", type: "number", min: 1, placeholder: "no limit" });
  const prio = h("input", { id: "create-priority", type: "number", min: -10, max: 10, value: 0 });
  const reprocess = h("select", { id: "create-reprocess" }, ...["none", "failed", "completed"].map((v) => h("option", { value: v }, v)));
  const backwards = h("input", { id: "create-backwards", type: "checkbox" });
  const conf = h("textarea", { id: "create-conf", placeholder: '{"full_refresh": true}' });
  const description = h("input", { id: "create-description", type: "text", maxlength: 1000 });
  const preview = h("section", { id: "preview", "aria-live": "polite" });

  const request = () => {
    const body = {
      dag_id: dag.value, from_date: isoUTC("From", from.value), to_date: isoUTC("To", to.value),
      max_active_runs: Number(mar.value), reprocess_behavior: reprocess.value, run_backwards: backwards.checked,
    };
    if (mfr.value !== "") body.max_failed_runs = Number(mfr.value);
    if (prio.value !== "" && Number(prio.value) !== 0) body.priority = Number(prio.value);
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
      h("label", { for: "create-priority" }, "Priority (−10..10)", prio),
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
          showError(createError(err));
        }
      };
      preview.replaceChildren(...previewSection(data, etag, create, { h }));
    } catch (err) {
      showError(createError(err));
    }
  });
  show(h("h2", {}, "New backfill"), dags.dags.length ? form : h("p", {}, "No DAG yet: ", h("a", { href: "#/dags" }, "create one"), " first."), preview);
}

// createError says what a refused create means and, for a 409 on the DAG's active backfill,
// links that backfill: the person's next step is to look at it.
function createError(err) {
  const code = err.problem && err.problem.code;
  if (code === "plan_changed") {
    return new Error("The plan changed since this preview (a run or the schedule changed): preview again.");
  }
  if (code === "backfill_already_running" && err.problem.active_backfill_id) {
    const id = err.problem.active_backfill_id;
    const e = new Error(`This DAG already has an active backfill, #${id}: wait for it to finish or cancel it.`);
    e.link = { href: `#/backfills/${id}`, text: `Open backfill #${id}` };
    return e;
  }
  return err;
}

// ---- Pools -----------------------------------------------------------------------------

// poolsPage lists pools with their slots, running and queued runs, pace and next start (while
// the pace is used up), read again every 2 s
// while the page is shown (a pool's figures move with every claim and report). The heading
// and the table are drawn once; each read replaces only the rows, so the page does not
// jump or lose the reader's place.
async function poolsPage() {
  const gen = routeGen;
  const tbody = h("tbody");
  const empty = h("p", {}, "No pool yet: create one with PUT /api/v1/pools/{name} or backfillctl pools put.");
  const table = h("table", { id: "pools" },
    h("thead", {}, h("tr", {}, ...["Pool", "Slots", "Running", "Queued", "In use", "Rate", "Next start", "Description"].map((t) => h("th", { scope: "col" }, t)))),
    tbody);
  const updated = h("p", { class: "muted", id: "pools-updated" });
  const draw = async () => {
    const { data } = await api("GET", "/pools?limit=1000");
    if (!current(gen)) return;
    empty.hidden = data.pools.length > 0;
    table.hidden = data.pools.length === 0;
    tbody.replaceChildren(...data.pools.map((p) => h("tr", { "data-pool": p.name },
      h("td", {}, p.name), h("td", { class: "slots" }, count(p.slots)), h("td", { class: "running" }, count(p.running)),
      h("td", { class: "queued" }, count(p.queued)), h("td", {}, poolBar(p)),
      h("td", { class: "rate" }, p.rate ? `${count(p.rate.runs)} per ${p.rate.per}` : "—"),
      h("td", { class: "next-start" }, p.next_start_at ? `${p.next_start_at.slice(11, 19)} UTC` : "—"),
      h("td", {}, p.description ?? ""))));
    updated.textContent = `Live: read every 2 s; last read ${new Date().toISOString().slice(11, 19)} UTC.`;
  };
  await draw();
  if (!current(gen)) return;
  show(h("h2", {}, "Pools"), updated, empty, table);
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
