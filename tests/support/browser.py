"""Headless Chromium from Debian (``chromium`` + ``chromium-driver``) driven by
Selenium, for the dashboard's browser tests; they skip when either is missing."""

from __future__ import annotations

import os
import shutil
from typing import Any, List

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def chromium_or_skip(*extra_args: str) -> Any:
    """A new headless Chromium session (quit it when done), or the test skips.
    ``extra_args``: more Chromium switches (``--host-resolver-rules=...``)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        pytest.skip("Debian's chromium and chromium-driver are not installed (make browser-tools)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1300", "--no-proxy-server", "--disable-extensions",
                *extra_args):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def browser_fixtures(*extra_args: str):
    """``(_driver, browser)``, the fixtures of a test module: one Chromium for the
    module (``extra_args``: see :func:`chromium_or_skip`), each test starting and
    ending on a blank page. Assign both at the module's top level."""
    @pytest.fixture(scope="module")
    def _driver():
        driver = chromium_or_skip(*extra_args)
        yield driver
        driver.quit()

    @pytest.fixture
    def browser(_driver):
        blank(_driver)
        yield _driver
        blank(_driver)  # before the test's server goes away

    return _driver, browser


def blank(driver: Any) -> None:
    """Leaves the last test's page (its live stream would retry a server that is
    gone) and forgets the console so far: each test reads only its own errors."""
    driver.get("about:blank")
    driver.get_log("browser")


def console_errors(driver: Any) -> List[dict]:
    """The browser console's errors since the last call (CSP violations included)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_for(driver: Any, condition, timeout: float = 30.0, message: str = "") -> Any:
    """Polls ``condition(driver)`` until truthy (fails the test after ``timeout`` s)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, message)
