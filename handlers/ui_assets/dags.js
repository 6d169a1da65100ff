// The DAGs page: the DAGs with their schedules and dependencies, and a form that creates one
// with PUT /dags/{dag_id}. The server validates (schedule, time zone, limits, upstreams and
// cycles); its problem detail is what the person reads. An existing DAG is replaced whole by a
// PUT, so that asks first, and keeps the DAG's upstreams unless the form names others.

import { confirmAction } from "./confirm.js";

export async function dagsPage({ api, h, show, showError }) {
  const { data } = await api("GET", "/dags?limit=1000");
  const known = new Map(data.dags.map((d) => [d.dag_id, d]));

  const id = h("input", { id: "dag-id", type: "text", required: true, maxlength: 250, placeholder: "sales_daily" });
  const schedule = h("input", { id: "dag-schedule", type: "text", required: true, placeholder: "@daily or 0 2 * * *" });
  const tz = h("input", { id: "dag-timezone", type: "text", value: "UTC", placeholder: "Europe/Amsterdam" });
  const mar = h("input", { id: "dag-max-active-runs", type: "number", min: 1, max: 1000, value: 16 });
  const paused = h("input", { id: "dag-paused", type: "checkbox" });
  const description = h("input", { id: "dag-description", type: "text", maxlength: 10000 });
  const upstreams = h("input", { id: "dag-upstreams", type: "text", placeholder: "raw_hourly, dim:all:6",
    title: "DAG_ID[:overlap|all[:LOOKBACK]], comma-separated; empty keeps an existing DAG's, - for none" });
  const pastDep = h("input", { id: "dag-depends-on-past", type: "checkbox" });
  const form = h("form", { id: "dag-form" },
    h("div", { class: "form-row" },
      h("label", { for: "dag-id" }, "DAG id", id),
      h("label", { for: "dag-schedule" }, "Schedule", schedule),
      h("label", { for: "dag-timezone" }, "Time zone", tz),
      h("label", { for: "dag-max-active-runs" }, "Max active runs", mar),
      h("label", { class: "check", for: "dag-paused" }, paused, "Paused"),
      h("label", { for: "dag-description" }, "Description", description),
      h("label", { for: "dag-upstreams" }, "Upstreams", upstreams),
      h("label", { class: "check", for: "dag-depends-on-past" }, pastDep, "Depends on past"),
      h("button", { type: "submit", id: "dag-save" }, "Create DAG")));

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    showError(null);
    const dagID = id.value.trim();
    const existing = known.get(dagID);
    let ups;
    try {
      ups = parseUpstreams(upstreams.value, existing);
    } catch (err) {
      showError(err);
      return;
    }
    if (existing) {
      const kept = upstreams.value.trim() === "" && existing.upstreams.length
        ? ` Its upstreams (${upstreamsText(existing.upstreams)}) are kept.` : "";
      if (!(await confirmAction(h, `DAG ${dagID} exists. Replace its schedule and settings?${kept}`, "Replace DAG"))) return;
    }
    const body = { schedule: schedule.value.trim(), max_active_runs: Number(mar.value), is_paused: paused.checked,
      upstreams: ups, depends_on_past: pastDep.checked };
    if (tz.value.trim() !== "") body.timezone = tz.value.trim();
    if (description.value.trim() !== "") body.description = description.value.trim();
    try {
      await api("PUT", `/dags/${encodeURIComponent(dagID)}`, { body });
      await dagsPage({ api, h, show, showError });
    } catch (err) {
      showError(err);
    }
  });

  show(h("h2", {}, "DAGs"),
    h("table", { id: "dags" },
      h("thead", {}, h("tr", {}, ...["DAG", "Schedule", "Time zone", "Max active runs", "Paused", "Upstreams", "Downstreams", "Description", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...data.dags.map((d) => h("tr", { "data-dag": d.dag_id },
        h("td", {}, d.dag_id), h("td", {}, h("code", {}, d.schedule)), h("td", {}, d.timezone),
        h("td", {}, d.max_active_runs), h("td", {}, d.is_paused ? "yes" : "no"),
        h("td", { class: "upstreams" }, upstreamsText(d.upstreams) + (d.depends_on_past ? " (and its past)" : "")),
        h("td", { class: "downstreams" }, d.downstreams.join(", ")), h("td", {}, d.description ?? ""),
        h("td", {}, h("a", { href: `#/backfills?dag_id=${encodeURIComponent(d.dag_id)}` }, "backfills")))))),
    h("h3", {}, "New DAG"), form);
}

// upstreamsText shows upstreams as the form and backfillctl take them.
function upstreamsText(ups) {
  return ups.map((u) => u.dag_id + (u.mapping !== "overlap" || u.lookback ? `:${u.mapping}` : "") +
    (u.lookback ? `:${u.lookback}` : "")).join(", ");
}

// parseUpstreams reads the form's upstreams: empty keeps an existing DAG's, "-" is none.
function parseUpstreams(text, existing) {
  text = text.trim();
  if (text === "") return existing ? existing.upstreams : [];
  if (text === "-") return [];
  return text.split(",").map((part) => {
    const [dagID, mapping, lookback, ...rest] = part.trim().split(":");
    if (!dagID || rest.length || (mapping !== undefined && mapping !== "overlap" && mapping !== "all") ||
        (lookback !== undefined && !/^[0-9]+$/.test(lookback))) {
      throw new Error(`Upstream "${part.trim()}": write DAG_ID, DAG_ID:overlap or DAG_ID:all, then :LOOKBACK if any.`);
    }
    const u = { dag_id: dagID };
    if (mapping !== undefined) u.mapping = mapping;
    if (lookback !== undefined) u.lookback = Number(lookback);
    return u;
  });
}
