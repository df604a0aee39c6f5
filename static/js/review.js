// Keyboard shortcuts of the review queue (/review/): a approve, f flag (with the reason typed
// above), e edit the task or rubric (Ctrl+Enter approves with the edit), n / j next item.
// Shortcuts never fire while a text box has the cursor or an error message is open: Esc leaves a
// text box, a second Esc closes the message. A refused verdict comes back with the cursor in the
// field it needs (the server marks it autofocus), so typing the reason types into the reason.
// The page works without this file: the shortcuts only press the form's own buttons.
(function () {
  "use strict";

  function typing(el) {
    return el && (el.tagName === "TEXTAREA" || el.tagName === "INPUT" || el.tagName === "SELECT" || el.isContentEditable);
  }

  function openMessages() {
    return Array.from(document.querySelectorAll(".messages .msg-error")).filter((m) => !m.hidden);
  }

  function closeMessages() {
    openMessages().forEach((m) => { m.hidden = true; });
  }

  function press(id) {
    const button = document.getElementById(id);
    if (!button) return false;
    button.click();
    return true;
  }

  function focusEnd(field) {
    field.focus();
    if (typeof field.setSelectionRange === "function") field.setSelectionRange(field.value.length, field.value.length);
  }

  function openEdit() {
    const box = document.getElementById("edit-box");
    if (!box) return false;
    box.open = true;
    document.getElementById("with-edit").checked = true;
    focusEnd(document.getElementById("edit") || document.getElementById("edit-question"));
    return true;
  }

  const EDIT_FIELDS = ["edit", "edit-question", "edit-answer"];

  function onKey(event) {
    if (event.altKey || event.metaKey) return;
    const active = document.activeElement;
    if (event.key === "Escape") {
      if (typing(active)) active.blur();
      else closeMessages();
      return;
    }
    if (event.key === "Enter" && event.ctrlKey && active) {
      if (EDIT_FIELDS.includes(active.id)) { event.preventDefault(); press("approve"); return; }
      if (active.id === "reason") { event.preventDefault(); press("flag"); return; }
    }
    if (event.ctrlKey || typing(active) || openMessages().length) return;
    const actions = {
      a: () => press("approve"),
      f: () => press("flag"),
      e: openEdit,
      n: () => press("next"),
      j: () => press("next"),
    };
    const action = actions[event.key];
    if (action && action()) event.preventDefault();
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!document.getElementById("review-item") && !document.getElementById("bulk")) return;
    openMessages().forEach((m) => {
      const close = document.createElement("button");
      close.type = "button";
      close.className = "msg-close";
      close.textContent = "×";
      close.title = "Close (Esc)";
      close.addEventListener("click", () => { m.hidden = true; });
      m.appendChild(close);
    });
    const wanted = document.querySelector("#review-item [autofocus], #bulk [autofocus]");
    if (wanted) focusEnd(wanted);
    const all = document.getElementById("bulk-all");
    if (all) {
      all.addEventListener("change", () => {
        document.querySelectorAll(".bulk-id").forEach((box) => { box.checked = all.checked; });
      });
    }
    if (document.getElementById("review-item")) {
      document.addEventListener("keydown", onKey);
      document.body.dataset.shortcuts = "on";  // keys work from now on (browser tests wait for it)
    }
  });
})();
