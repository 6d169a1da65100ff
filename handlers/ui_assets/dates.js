// The create form's window is typed as ISO 8601 in UTC ("2024-01-01T00:00:00Z"), not through
// the browser's date picker, which writes and reads the browser's locale ("01/02/2024" is 1
// February in one and 2 January in another) while the API means UTC.

const FORM = /^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?Z?$/;

// isoUTC answers the RFC 3339 UTC time a field holds: a date alone is its midnight, missing
// seconds are 00, and the "Z" may be left out (the field says UTC). Anything else throws,
// naming the field.
export function isoUTC(label, value) {
  const m = FORM.exec(value.trim());
  const t = m && `${m[1]}T${m[2] || "00"}:${m[3] || "00"}:${m[4] || "00"}Z`;
  if (!t || isNaN(Date.parse(t)) || new Date(t).toISOString().slice(0, 10) !== m[1]) {
    throw new Error(`${label}: "${value}" is not an ISO 8601 time in UTC; write it as 2024-01-01T00:00:00Z.`);
  }
  return t;
}

// dateInput is a text field for one such time.
export function dateInput(h, id) {
  return h("input", {
    id, type: "text", required: true, inputmode: "numeric", spellcheck: "false", autocomplete: "off",
    placeholder: "2024-01-01T00:00:00Z", pattern: "\\d{4}-\\d{2}-\\d{2}([T ]\\d{2}:\\d{2}(:\\d{2})?)?Z?",
    title: "ISO 8601 in UTC: 2024-01-01T00:00:00Z (a date alone is its midnight)",
  });
}
