// Timestamps for people: to the second, in UTC, followed by the browser's own zone
// ("2026-12-02 17:20:05 UTC (18:20:05 local)"); the local date is added only when it differs
// from the UTC one. The API answers microseconds; nobody steering a backfill needs them.

const pad = (n) => String(n).padStart(2, "0");

function parts(d, utc) {
  const get = (m) => (utc ? d[`getUTC${m}`]() : d[`get${m}`]());
  return {
    date: `${get("FullYear")}-${pad(get("Month") + 1)}-${pad(get("Date"))}`,
    time: `${pad(get("Hours"))}:${pad(get("Minutes"))}:${pad(get("Seconds"))}`,
  };
}

// fmtTime formats an RFC 3339 timestamp; null or empty is "—".
export function fmtTime(s) {
  if (!s) return "—";
  const d = new Date(s);
  if (isNaN(d)) return String(s);
  const u = parts(d, true);
  const l = parts(d, false);
  const local = l.date === u.date ? l.time : `${l.date} ${l.time}`;
  return `${u.date} ${u.time} UTC (${local} local)`;
}
