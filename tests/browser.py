"""Headless Chromium over Selenium for the tests that look at pages as a person would, or a
skip naming what is missing (CI installs Debian's chromium and chromium-driver)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# A failed browser test leaves its last page here as a PNG, kept by CI as an artifact: a
# layout failure is read from the picture faster than from an assertion about pixels.
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR", "var/test-artifacts"))
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 15
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)


@contextmanager
def chromium(profile_dir: Path) -> Iterator[Any]:
    """A driver with a fresh profile in ``profile_dir``; skips the test without Chromium."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        reason = f"needs {' and '.join(missing)} (apt-get install chromium chromium-driver)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(WAIT_S)
    driver.set_page_load_timeout(WAIT_S * 2)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile_dir, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[Any]:
    """Keep each phase's report on the item, so the browser fixture knows whether the test
    body failed when it tears down."""
    outcome: Any = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


def screenshot_path(nodeid: str) -> Path:
    """Where a test's failure screenshot goes: its node id made a file name."""
    return ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', nodeid).strip('_')}.png"


@pytest.fixture
def browser(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The headless browser for one test (tests/conftest.py makes it every test's fixture);
    a failed test leaves a screenshot of the page it was on under ``ARTIFACTS``."""
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            path = screenshot_path(request.node.nodeid)
            path.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(path))
            print(f"screenshot of the failed page: {path}")
