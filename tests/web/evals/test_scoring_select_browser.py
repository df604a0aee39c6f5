"""The Scoring select of /evals/'s "Add a benchmark" form shows its options whole: the automatic choice's rule
is a help line under it, not an option label cut off at the select's edge ("…every answer is a nun")."""
import pytest

from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")]

# the widest option's text, drawn in the select's own font, against the room the select gives it
MEASURE = """() => {
  const select = document.getElementById('up-scoring');
  const span = document.createElement('span');
  span.style.font = getComputedStyle(select).font; span.style.whiteSpace = 'pre'; span.style.position = 'absolute';
  document.body.appendChild(span);
  let widest = 0;
  for (const option of select.options) { span.textContent = option.text; widest = Math.max(widest, span.getBoundingClientRect().width); }
  span.remove();
  return [widest, select.clientWidth, [...select.options].map(o => o.text)];
}"""


def test_the_scoring_options_are_readable(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/evals/", {"width": 1400, "height": 900})
        try:
            widest, room, texts = page.evaluate(MEASURE)
            assert widest + 24 <= room, (widest, room, texts)  # 24 px for the select's arrow and padding
            assert texts[0] == "automatic" and {"math", "mcq", "exact"} <= set(texts)
            help_text = page.locator("#up-scoring-help").inner_text()
            assert "math when every answer is a number" in help_text and page.locator("#up-scoring-help").is_visible()
            assert errors == []
        finally:
            browser.close()
