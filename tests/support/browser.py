"""Headless Chromium (Debian's ``chromium`` with ``chromium-driver``) driven through selenium, for the tests of the
service's pages and ``bench/page.py``.

    reason = browser_unavailable()          # "" when a browser can be driven here
    with headless_chromium() as driver:
        driver.get(url)
        ...
        urls = requests_seen(driver)        # every URL the pages asked for since the last call

The driver is started with the chromium-driver found on PATH (selenium's own manager would try to download one),
with every wait bounded: page loads and scripts time out after ``timeout_s``.
"""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from typing import Iterator, List

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str:
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), "")


def browser_unavailable() -> str:
    """Why no headless browser can be driven here ("" when one can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra installs it)"
    if not _chromium():
        return "no chromium on PATH (apt-get install chromium chromium-driver; .ci/run installs them)"
    if not shutil.which("chromedriver"):
        return "no chromedriver on PATH (apt-get install chromium-driver)"
    return ""


@contextmanager
def headless_chromium(width: int = 1100, height: int = 1400, timeout_s: float = 30.0) -> Iterator["object"]:
    """A headless Chromium session (``selenium.webdriver.Chrome``), quit at exit. Its network requests are logged
    (read them with :func:`requests_seen`); its window is ``width`` x ``height`` CSS pixels."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_page_load_timeout(timeout_s)
        driver.set_script_timeout(timeout_s)
        yield driver
    finally:
        driver.quit()


def requests_seen(driver: "object") -> List[str]:
    """Every URL the browser's pages requested since the last call (from Chrome's DevTools network events, whose
    log reading empties)."""
    urls = []
    for entry in driver.get_log("performance"):  # type: ignore[attr-defined]
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_errors(driver: "object") -> List[str]:
    """The messages of SEVERE entries in the browser console (script errors, CSP violations, failed loads)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]  # type: ignore[attr-defined]
