"""``goodput serve`` attacked from a real browser (headless Chromium): a page
on another site whose name resolves to the dashboard's address (DNS
rebinding) tries to read it through a refused request's body; run names that
browsers rewrite in an address (``.``, ``..``) and an address that is not
percent-encoded UTF-8."""

from __future__ import annotations


from goodput_core.stores import open_store
from tests.core.cli.test_serve_api import _simple
from tests.support.browser import browser_fixtures, console_errors, wait_for
from tests.support.dashboard import dashboard

EVIL = "evil.test"  # the attacker's name; Chromium resolves it to 127.0.0.1

# What the attacker's script does once its name points at the dashboard: a POST
# (any body is allowed, no preflight for text/plain) whose body is a request
# naming the dashboard, then plain fetches on the kept-alive connection.
_SMUGGLE = """
const [port, done] = [arguments[0], arguments[arguments.length - 1]];
(async () => {
  const inner = `GET /api/runs HTTP/1.1\\r\\nHost: 127.0.0.1:${port}\\r\\n\\r\\n`;
  const seen = [];
  for (let i = 0; i < 3; i++) {
    try {
      const r = await fetch("/api/runs", {method: "POST", body: inner});
      seen.push([r.status, await r.text()]);
    } catch (e) { seen.push([0, String(e)]); }
    for (let j = 0; j < 2; j++) {
      try {
        const r = await fetch("/api/runs", {cache: "no-store"});
        seen.push([r.status, await r.text()]);
      } catch (e) { seen.push([0, String(e)]); }
    }
  }
  done(seen);
})();
"""


_driver, browser = browser_fixtures(f"--host-resolver-rules=MAP {EVIL} 127.0.0.1")


def _store(tmp_path, *names):
    url = f"sqlite:///{tmp_path}/b.sqlite"
    store = open_store(url)
    for name in names:
        store.append(_simple(name))
    store.close()
    return url


def test_a_page_on_another_site_cannot_read_the_dashboard_through_a_refused_body(
        browser, tmp_path):
    url = _store(tmp_path, "secret-run")
    with dashboard(url) as srv:
        port = srv.server_port
        # the attacker's page, on its own name (what it served before rebinding)
        browser.get(f"http://{EVIL}:{port}/")
        browser.set_script_timeout(60)
        seen = browser.execute_async_script(_SMUGGLE, port)
    statuses = [status for status, _ in seen]
    assert statuses and set(statuses) <= {421, 0}, seen  # refused, or a closed connection
    assert 421 in statuses
    assert not any("secret-run" in text for _, text in seen), seen


def test_run_names_that_are_path_segments_open_their_page(browser, tmp_path):
    names = [".", "..", "%", "~x", "a/b"]
    url = _store(tmp_path, *names)
    with dashboard(url) as srv:
        for name in names:
            browser.get(srv.url)
            link = wait_for(browser, lambda d: next(
                (a for a in d.find_elements("css selector", "a.run-link") if a.text == name),
                None), message=f"no link for {name!r}")
            link.click()
            wait_for(browser, lambda d: d.execute_script("return document.body.dataset.version"),
                     message=f"the page of {name!r} never loaded")
            assert browser.find_element("id", "run-name").text == name
            assert browser.find_element("id", "goodput").text == "90.00 %"
            assert console_errors(browser) == []


def test_an_address_that_is_not_utf8_says_so(browser, tmp_path):
    url = _store(tmp_path, "r")
    with dashboard(url) as srv:
        browser.get(srv.url + "run/%E0%A4%A")
        box = wait_for(browser, lambda d: d.find_element("id", "error").is_displayed()
                       and d.find_element("id", "error"), message="no error shown")
        assert "not percent-encoded UTF-8" in box.text
        assert [e for e in console_errors(browser) if "URIError" in e["message"]] == []
