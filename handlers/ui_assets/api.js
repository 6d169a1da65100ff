// The console's calls to the public API (/api/v1), with the tab's bearer token when one was
// given; a 401 asks for one.

import { $ } from "./dom.js";

export const API = "api/v1";
export const TOKEN_KEY = "backfill.token";

export class APIError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${problem.title || status}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

export async function api(method, path, { body, headers = {}, raw = false } = {}) {
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

export function askForToken(problem) {
  const form = $("#token-form");
  form.hidden = false;
  $("#token-reason").textContent = (problem && problem.detail ? problem.detail : "This service needs an API token.") +
    (token() ? " The token you gave was refused." : "");
  $("#token-input").focus();
}
