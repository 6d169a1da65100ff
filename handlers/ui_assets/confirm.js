// confirmAction asks before a step that touches many runs, in a modal <dialog> of the page
// (not window.confirm, which a browser may suppress and which blocks the whole tab). It
// resolves true only when the person chose the action; Escape or "Keep" resolve false.

export function confirmAction(h, message, actionLabel) {
  const dialog = h("dialog", { id: "confirm", "aria-labelledby": "confirm-message" });
  const keep = h("button", { type: "button", class: "secondary", id: "confirm-no" }, "Keep as is");
  const yes = h("button", { type: "button", class: "danger", id: "confirm-yes" }, actionLabel);
  dialog.append(h("p", { id: "confirm-message" }, message), h("div", { class: "actions" }, keep, yes));
  document.body.append(dialog);
  return new Promise((resolve) => {
    let answer = false;
    keep.addEventListener("click", () => dialog.close());
    yes.addEventListener("click", () => { answer = true; dialog.close(); });
    dialog.addEventListener("close", () => { dialog.remove(); resolve(answer); });
    dialog.showModal();
    keep.focus(); // the safe choice has the focus: Enter does not cancel a backfill
  });
}

export { count } from "./format.js";
