"""Headless Chromium over Selenium for the tests that look at pages as a person would, or a
skip naming what is missing (CI installs Debian's chromium and chromium-driver)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
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


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """The headless browser for one test (tests/conftest.py makes it every test's fixture)."""
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver
