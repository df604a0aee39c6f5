// Keyboard shortcuts of the review queue (/review/): a approve, f flag (with the reason typed
// above), e edit the rubric (Ctrl+Enter saves it), n / j next item, Esc leaves a text box.
// The page works without this file: the shortcuts only press the form's own buttons.
(function () {
  "use strict";

  function typing(el) {
    return el && (el.tagName === "TEXTAREA" || el.tagName === "INPUT" || el.tagName === "SELECT" || el.isContentEditable);
  }

  function press(id) {
    const button = document.getElementById(id);
    if (!button) return false;
    button.click();
    return true;
  }

  function openEdit() {
    const box = document.getElementById("edit-box");
    if (!box) return false;
    box.open = true;
    document.getElementById("with-edit").checked = true;
    const text = document.getElementById("edit");
    text.focus();
    text.setSelectionRange(text.value.length, text.value.length);
    return true;
  }

  function onKey(event) {
    if (event.altKey || event.metaKey) return;
    const active = document.activeElement;
    if (event.key === "Escape" && typing(active)) { active.blur(); return; }
    if (event.key === "Enter" && event.ctrlKey && active && active.id === "edit") {
      event.preventDefault();
      press("approve");
      return;
    }
    if (event.ctrlKey || typing(active)) return;
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
    if (document.getElementById("review-item")) document.addEventListener("keydown", onKey);
  });
})();
