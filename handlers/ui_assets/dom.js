// The console's DOM helpers: every element is made with h(), never from HTML strings, so
// nothing the API returns can inject markup.

export function h(tag, attrs = {}, ...children) {
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

export const $ = (sel) => document.querySelector(sel);

export function show(...nodes) {
  const view = $("#view");
  view.replaceChildren(...nodes);
}

// showError shows err in the banner (null hides it). An error with a `link` ({ href, text })
// ends with that link: the way out it names, such as the backfill a 409 is about.
export function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.replaceChildren(); return; }
  box.hidden = false;
  box.replaceChildren(err.message || String(err));
  if (err.link) box.append(" ", h("a", { href: err.link.href, id: "error-link" }, err.link.text));
}
