"""``goodput serve`` in a real browser: headless Chromium from Debian, driven by
Selenium. Each page loads without a console error (a CSP violation is one),
shows the numbers of ``goodput report --json``, follows a writer process
without a reload, and shows a hostile run name as text.

``DASHBOARD_SCREENSHOTS=DIR`` saves the run page's picture there (the README's
picture is docs/img/serve-run-page.png, taken this way).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from goodput_core.stores import open_store
from tests.core.cli.test_serve_api import _simple
from tests.support.browser import browser_fixtures, console_errors, wait_for
from tests.support.cli_process import goodput, synthetic_job_events
from tests.support.dashboard import HOSTILE_RUN, dashboard


_driver, browser = browser_fixtures()


def _text(driver, css):
    return driver.find_element("css selector", css).text


def _loaded(driver):
    return wait_for(driver, lambda d: d.execute_script("return document.body.dataset.version"),
                    message="the run page never finished loading")


def _store_with(tmp_path, *runs):
    url = f"sqlite:///{tmp_path}/b.sqlite"
    store = open_store(url)
    for events in runs:
        store.append(events)
    store.close()
    return url


def test_run_page_shows_the_report_numbers(browser, tmp_path):
    from goodput_core.events import EventRecord, Kind

    events = synthetic_job_events("synthetic")
    # the model's size and the devices: program goodput and MPG are known
    events.append(EventRecord("synthetic", int(Kind.METADATA), events[0].time, None,
                              {"flops_per_step": 2e12, "peak_flops_per_device": 1e12,
                               "num_devices": 4}))
    url = _store_with(tmp_path, events)
    cli = goodput("report", "synthetic", "--store", url, "--json")
    rep = json.loads(cli.stdout)
    assert rep["program_goodput"] is not None
    with dashboard(url) as srv:
        browser.get(srv.url + "run/synthetic")
        _loaded(browser)
        assert _text(browser, "#goodput") == f"{rep['goodput_percent']:.2f} %"
        assert _text(browser, "#total") == f"{rep['total_seconds']:.3f} s"
        assert _text(browser, "#disruptions") == str(rep["disruptions"])
        assert _text(browser, "#last-step") == str(rep["last_step"])
        mpg = rep["program_goodput"]["ml_productivity_goodput"]
        assert _text(browser, "#mpg") == f"MPG {100 * mpg:.2f} %"
        items = [li.text for li in browser.find_elements("css selector", "#insights li")]
        (crash,) = rep["incidents"]["incidents"]
        assert f"Incident: {crash['cause']} at " in items[0]
        assert f"{crash['lost_seconds']:.3f} s of progress lost" in items[0]
        assert _text(browser, "#state").startswith("ended")
        shown = {}
        for row in browser.find_elements("css selector", "#breakdown-body tr"):
            name = row.get_attribute("data-bucket")
            shown[name] = (row.find_element("css selector", ".secs").text,
                           row.find_element("css selector", ".pct").text)
        expected = {k: (f"{v:.3f} s", f"{rep['badput_percent'][k]:.2f} %")
                    for k, v in rep["badput_seconds"].items() if v > 0}
        expected["PRODUCTIVE"] = (f"{rep['productive_seconds']:.3f} s",
                                  f"{rep['goodput_percent']:.2f} %")
        for k, v in rep["custom_badput_seconds"].items():
            expected[f"CUSTOM_BADPUT_EVENTS:{k}"] = (
                f"{v:.3f} s", f"{rep['custom_badput_percent'][k]:.2f} %")
        assert shown == expected
        # the charts drew: timeline spans, the stacked series and step times
        assert browser.find_elements("css selector", "#timeline rect.span")
        # the two attempts and the crash between them are marked
        assert len(browser.find_elements("css selector", "#timeline .marker-attempt")) == 2
        assert len(browser.find_elements("css selector", "#timeline .marker-disruption")) == 1
        assert browser.find_elements("css selector", "#series polygon.layer")
        assert browser.find_elements("css selector", "#steps polyline.step-mean")
        # hovering a span says what it is
        tip = browser.find_element("css selector", "#timeline rect.span title")
        assert tip.get_attribute("textContent").split("\n")[0].split(" (")[0] in \
            set(rep["badput_seconds"]) | {"PRODUCTIVE"} | {
                f"CUSTOM_BADPUT_EVENTS:{k}" for k in rep["custom_badput_seconds"]}
        # zoom in on the timeline: a narrower range is fetched and drawn
        box = browser.find_element("id", "timeline")
        shown = lambda d: (float(d.find_element("id", "timeline").get_attribute("data-start")),  # noqa: E731
                           float(d.find_element("id", "timeline").get_attribute("data-end")))
        whole = shown(browser)
        browser.find_element("id", "zoom-in").click()
        wait_for(browser, lambda d: shown(d)[1] - shown(d)[0] < (whole[1] - whole[0]) * 0.6,
                 message="zoom did not narrow the timeline")
        # drag to the left: a later stretch of the same length
        zoomed = shown(browser)
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(browser).move_to_element(box).click_and_hold().move_by_offset(-200, 0) \
            .release().perform()
        wait_for(browser, lambda d: shown(d)[0] > zoomed[0] + 1, message="drag did not pan")
        assert shown(browser)[1] - shown(browser)[0] == pytest.approx(zoomed[1] - zoomed[0])
        # a double click shows the whole run again
        ActionChains(browser).double_click(box).perform()
        wait_for(browser, lambda d: shown(d) == whole, message="double click did not reset")
        shots = os.environ.get("DASHBOARD_SCREENSHOTS")
        if shots:
            browser.find_element("id", "zoom-reset").click()
            browser.save_screenshot(os.path.join(shots, "serve-run-page.png"))
        assert console_errors(browser) == []


def test_runs_and_compare_pages_load_without_console_errors(browser, tmp_path):
    url = _store_with(tmp_path, _simple("a", group="sweep"), _simple("b", group="sweep"),
                      synthetic_job_events("solo"))
    with dashboard(url) as srv:
        browser.get(srv.url)
        wait_for(browser, lambda d: len(d.find_elements("css selector", "#runs-body tr")) == 3)
        rows = {r.get_attribute("data-run"): r.find_element("css selector", ".goodput").text
                for r in browser.find_elements("css selector", "#runs-body tr")}
        assert rows["a"] == rows["b"] == "90.00 %"  # by hand: 90 of 100 s productive
        # filter by group
        from selenium.webdriver.support.ui import Select
        Select(browser.find_element("id", "group")).select_by_value("sweep")
        wait_for(browser, lambda d: len(d.find_elements("css selector", "#runs-body tr")) == 2)
        browser.get(srv.url + "compare?group=sweep")
        wait_for(browser, lambda d: d.find_elements("css selector", "#compare-body tr"))
        cells = browser.find_elements("css selector", "#compare-body tr[data-row=goodput] td")
        assert [c.text for c in cells] == ["90.00 %", "90.00 %"]
        assert console_errors(browser) == []


def test_a_writer_process_changes_the_page_without_a_reload(browser, tmp_path):
    evs = _simple("live")
    url = _store_with(tmp_path, evs[:6])  # job start, init, three steps: running
    with dashboard(url, min_interval=0.0) as srv:
        browser.get(srv.url + "run/live")
        _loaded(browser)
        browser.execute_script("window.__sameDocument = true")
        first = _text(browser, "#last-step")
        assert first == "2"
        code = ("import sys, pickle; from goodput_core.stores import open_store; "
                "s = open_store(sys.argv[1]); s.append(pickle.loads(sys.stdin.buffer.read())); "
                "s.close()")
        subprocess.run([sys.executable, "-c", code, url], input=pickle.dumps(evs[6:]),
                       check=True, timeout=60)
        # within 2 s of being stored (the stream polls twice a second); 30 s is the
        # test's patience on a loaded machine, not the promise
        wait_for(browser, lambda d: _text(d, "#last-step") == "8")
        # it came over the live stream, not the page's slow fallback timer
        assert int(browser.execute_script("return document.body.dataset.changes || 0")) >= 1
        assert _text(browser, "#goodput") == "90.00 %"
        assert _text(browser, "#state").startswith("ended")
        assert browser.execute_script("return window.__sameDocument") is True  # no reload


def test_a_hostile_run_name_is_shown_as_text(browser, tmp_path):
    url = _store_with(tmp_path, _simple(HOSTILE_RUN))
    with dashboard(url) as srv:
        browser.get(srv.url)
        wait_for(browser, lambda d: d.find_elements("css selector", "#runs-body a.run-link"))
        link = browser.find_element("css selector", "#runs-body a.run-link")
        assert link.text == HOSTILE_RUN
        link.click()
        _loaded(browser)
        assert _text(browser, "#run-name") == HOSTILE_RUN
        assert browser.title == f"{HOSTILE_RUN} - goodput"
        assert _text(browser, "#goodput") == "90.00 %"
        # nothing from the name became markup: only the page's own two scripts
        assert browser.execute_script("return document.scripts.length") == 2
        assert browser.execute_script("return typeof window.alert") == "function"
        assert console_errors(browser) == []


def _two_hosts_with_an_open_hang():
    """Four processes on one run (process 3 alone loads data 5 s before each step:
    by hand the host outlier), and an open hang after step 3."""
    from goodput_core.events import EventRecord, Kind

    import time

    # an open run is measured up to now: it starts a minute ago, so that process 3's
    # 20 s of loading is more than the outlier rule's 1 % of the total time
    run, t0 = "hosts", time.time() - 60
    evs = []
    for p in range(4):
        def e(kind, t, step=None, extra=None, p=p):
            return EventRecord(run, int(kind), t0 + t, step, extra, process_index=p)
        evs += [e(Kind.JOB_START, 0)]
        for i in range(4):
            if p == 3:
                evs += [e(Kind.DATA_LOADING_START, 10 * i), e(Kind.DATA_LOADING_END, 10 * i + 5)]
            evs.append(e(Kind.STEP_START, 10 * i + (5 if p == 3 else 0), i))
    evs.append(EventRecord(run, int(Kind.HANG), t0 + 60, 3,
                           {"last_progress_time": t0 + 35, "expected_step_seconds": 10.0}))
    return evs


def test_insights_hosts_and_a_stopped_run_are_shown(browser, tmp_path):
    from goodput_core.events import EventRecord, Kind

    crashed = _simple("crashed")[:6] + [
        EventRecord("crashed", int(Kind.DISRUPTION), 1_700_000_000.0 + 35, None,
                    {"disruption_cause": "SIGTERM"})]
    url = _store_with(tmp_path, _two_hosts_with_an_open_hang(), crashed)
    rep = json.loads(goodput("report", "hosts", "--store", url, "--json").stdout)
    assert rep["insights"]["hosts"] is not None  # several process indices
    with dashboard(url) as srv:
        browser.get(srv.url + "run/hosts")
        _loaded(browser)
        items = [li.text for li in browser.find_elements("css selector", "#insights li")]
        assert any(x.startswith("Hang open now at step 3") for x in items), items
        outliers = rep["insights"]["hosts"]["outliers"]
        assert [o["process_index"] for o in outliers] == [3]
        for o in outliers:
            assert any(x.startswith(f"Host {o['process_index']} is an outlier") for x in items)
        rows = browser.find_elements("css selector", "#hosts-body tr")
        assert [r.find_elements("css selector", "td")[0].text for r in rows] == \
            [str(h["process_index"]) for h in rep["insights"]["hosts"]["hosts"]]
        browser.get(srv.url + "run/crashed")
        _loaded(browser)
        assert _text(browser, "#state").startswith("stopped")
        assert console_errors(browser) == []


def test_a_token_in_the_address_becomes_a_cookie_and_leaves_the_address(browser, tmp_path):
    url = _store_with(tmp_path, _simple("tok"))
    with dashboard(url, token="t0k-en") as srv:
        browser.get(srv.url + "run/tok?token=t0k-en")
        _loaded(browser)
        assert _text(browser, "#goodput") == "90.00 %"
        assert "token" not in browser.current_url
        browser.get(srv.url + "run/tok")  # the cookie carries it from now on
        _loaded(browser)
        assert console_errors(browser) == []
        browser.delete_all_cookies()
        browser.get(srv.url)  # without it, not even the page is served
        assert "a token is needed" in _text(browser, "body")


def test_mpg_from_submission_where_the_run_was_scheduled(browser, tmp_path):
    from goodput_core.events import EventRecord, Kind

    events = synthetic_job_events("queued")
    t0 = events[0].time
    # submitted 30 s before it got its resources (by hand SG = 83.7 / 113.7), with
    # the model's size: program goodput is known, so MPG = SG x RG x PG
    events += [EventRecord("queued", int(Kind.JOB_SUBMITTED), t0 - 30, None, None),
               EventRecord("queued", int(Kind.RESOURCES_GRANTED), t0, None, None),
               EventRecord("queued", int(Kind.METADATA), t0, None,
                           {"flops_per_step": 2e12, "peak_flops_per_device": 1e12,
                            "num_devices": 4})]
    url = _store_with(tmp_path, events)
    rep = json.loads(goodput("report", "queued", "--store", url, "--json").stdout)
    lc = rep["lifecycle"]
    assert lc["available"] and lc["scheduling_goodput"] == pytest.approx(83.7 / 113.7)
    assert lc["mpg"] != pytest.approx(rep["program_goodput"]["ml_productivity_goodput"])
    with dashboard(url) as srv:
        browser.get(srv.url + "run/queued")
        _loaded(browser)
        assert _text(browser, "#mpg") == f"MPG {100 * lc['mpg']:.2f} %"


def test_system_metrics_and_a_duty_cycle_drop_are_shown(browser, tmp_path):
    from goodput_core.events import EventRecord, Kind

    events = synthetic_job_events("sysrun")
    t0 = events[0].time
    # what log_system_metrics records every 10 s: host CPU and memory, TPU duty cycle
    for i, duty in enumerate([91, 90, 92, 12, 90]):
        t = t0 + 10 * (i + 1)
        for name, value in (("host_cpu_utilization", 30.0 + i), ("host_memory_utilization", 40.0),
                            ("tpu_duty_cycle", float(duty))):
            events.append(EventRecord("sysrun", int(Kind.METRIC), t, None,
                                      {"metric_name": name, "metric_value": value}))
    url = _store_with(tmp_path, events)
    rep = json.loads(goodput("report", "sysrun", "--store", url, "--json").stdout)
    with dashboard(url) as srv:
        browser.get(srv.url + "run/sysrun")
        _loaded(browser)
        rows = {r.get_attribute("data-metric"): r.find_elements("css selector", "td")[1].text
                for r in browser.find_elements("css selector", "#system-body tr")}
        assert rows == {name: f"{rep['metrics'][name]['value']:.2f} %" for name in
                        ("host_cpu_utilization", "host_memory_utilization", "tpu_duty_cycle")}
        assert rows["host_cpu_utilization"] == "34.00 %"
        # the drop to 12 % is marked on the timeline, where it happened
        (drop,) = browser.find_elements("css selector", "#timeline .marker-duty-drop")
        title = drop.find_element("css selector", "title").get_attribute("textContent")
        assert title.startswith("accelerator duty cycle dropped at ")
        assert console_errors(browser) == []
