// The evaluation forms: "First N items" follows the queue's default (10 on the CPU, 100 on a GPU)
// until the person types a number of their own.
(function () {
  "use strict";
  if (window.evalFormReady) return;
  window.evalFormReady = true;
  const DEFAULTS = { cpu: "10", gpu: "100" };
  document.addEventListener("change", function (event) {
    const select = event.target;
    if (!select.id) return;
    document.querySelectorAll(`input[data-follows-queue="#${select.id}"]`).forEach(function (limit) {
      const known = Object.values(DEFAULTS);
      if (known.includes(limit.value) && DEFAULTS[select.value]) limit.value = DEFAULTS[select.value];
    });
  }, true);
})();
