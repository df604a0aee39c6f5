// The runs list (templates/runs/index.html).
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
// Compare: /runs/compare/?ids=1,2 (the form alone sends ?ids=1&ids=2, which works too).
document.getElementById("compare-form")?.addEventListener("submit", (ev) => {
  const ids = [...ev.target.querySelectorAll('input[name="ids"]:checked')].map(b => b.value);
  ev.preventDefault();
  location.href = ev.target.action + "?ids=" + ids.join(",");
});
