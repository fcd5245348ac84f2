"""The first hour in a real browser, on the data `make demo` left: `make admin` serves the
admin and prints a login; a person signs in and finds what they came for on each page at
1400 px (a command's state before its timeline, a sensor's chart in its unit, the rules, an
aborted rollout that says so); then takes an API token from the admin, signs out, and calls
the API from its docs page with that token alone. Runs on whichever servers the suite runs
on (the embedded default or PostgreSQL); skipped, with the reason, without Chromium."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.demo import DEMO_FARM
from devtools.management.commands.demo_admin import ADMIN_LOGIN
from tests.devtools.conftest import ROOT, DemoRun
from tests.mqtt_fixtures import free_port, port_open
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

WIDTH = 1400
HEADER_BG = "rgb(65, 118, 144)"  # #header in the admin's base.css (--header-bg)
LOGIN = re.compile(rf"^login {ADMIN_LOGIN} / (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Served:
    base: str
    password: str


@pytest.fixture
def served(demo_ran: DemoRun, tmp_path: Path) -> Iterator[Served]:
    """``make admin ADMIN_ARGS=--reset`` on a free port, until the test ends."""
    port = free_port()
    output = tmp_path / "admin.log"
    with output.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "demo_admin", "--reset", "--port", str(port)],
            cwd=ROOT,
            env=demo_ran.env | {"PYTHONUNBUFFERED": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def printed() -> str | None:
            assert proc.poll() is None, output.read_text()[-3000:]
            found = LOGIN.search(output.read_text())
            return found[1] if found else None

        password = wait_for(printed, "make admin to print its login")
        wait_for(lambda: port_open(port), f"make admin to listen on {port}")
        yield Served(f"http://127.0.0.1:{port}", password)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a person stops it
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _js(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


def _fits(driver: Any) -> None:
    """The change list needs no horizontal scroll at this width."""
    table, room = _js(
        driver,
        "return [document.querySelector('#result_list').offsetWidth,"
        " document.querySelector('.results').clientWidth]",
    )
    assert table <= room, f"{driver.current_url}: the list is {table} px in {room} px"


def _text_becomes(driver: Any, css: str, wanted: Callable[[str], bool], what: str) -> str:
    """The first text of ``css`` that ``wanted`` accepts (the page redraws it meanwhile)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def seen() -> str | None:
        try:
            text: str = driver.find_element(By.CSS_SELECTOR, css).text
        except (NoSuchElementException, StaleElementReferenceException):
            return None
        return text if wanted(text) else None

    found: str = wait_for(seen, what)
    return found


def test_from_make_admin_through_the_pages_to_the_api_with_a_token(
    served: Served, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    browser.set_window_size(WIDTH, 900)
    base = served.base
    browser.get(f"{base}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys(ADMIN_LOGIN)
    browser.find_element(By.NAME, "password").send_keys(served.password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    browser.find_element(By.ID, "api-token-link")  # signed in (the login page has no such link)
    assert browser.find_element(By.ID, "site-name").text == "Farm Automation Core"
    header = _js(
        browser, "return getComputedStyle(document.getElementById('header')).backgroundColor"
    )
    assert header == HEADER_BG  # the admin's own stylesheet, served by `make admin` itself

    # A command: its state, target and value lead; the timeline follows; internals folded.
    browser.get(f"{base}/admin/automation/devicecommand/")
    _fits(browser)
    applied = [
        row.find_element(By.CSS_SELECTOR, "th a").get_attribute("href")
        for row in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
        if "Applied" in row.text
    ]
    assert applied, browser.find_element(By.ID, "result_list").text
    browser.get(applied[0])
    state = browser.find_element(By.ID, "command-state")
    timeline = browser.find_element(By.CSS_SELECTOR, "table#command-timeline.timeline")
    assert state.text == "Applied"
    assert state.location["y"] < timeline.location["y"] < 900, (state.location, timeline.location)
    stages = {row.get_attribute("class") for row in timeline.find_elements(By.TAG_NAME, "tr")}
    assert {"stage-command", "stage-transition", "stage-receipt"} <= stages, stages
    folded = browser.find_elements(By.CSS_SELECTOR, "fieldset.collapse details")
    assert folded and all(d.get_attribute("open") is None for d in folded)

    # A sensor's page: its chart has points, and its readings show their unit.
    browser.get(f"{base}/admin/devices/device/")
    _fits(browser)
    browser.find_element(By.LINK_TEXT, "DEMO-S01").click()
    chart = browser.find_element(By.CSS_SELECTOR, "svg.endpoint-chart")
    points = [
        int(series.get_attribute("data-points"))
        for series in chart.find_elements(By.CSS_SELECTOR, "g.series")
    ]
    assert points and max(points) > 1, points
    assert "°C" in browser.find_element(By.ID, "content").text

    browser.get(f"{base}/admin/automation/automationrule/")
    _fits(browser)
    assert "Vent on 1" in browser.find_element(By.ID, "result_list").text

    browser.get(f"{base}/admin/rollouts/rollout/")
    _fits(browser)
    aborted = browser.find_element(By.CSS_SELECTOR, "span.rollout-progress.rollout-aborted")
    assert "aborted" in aborted.text.lower()

    # A token from the admin's user links, shown once; then signed out, the docs page's
    # Authorize takes it and a call succeeds on it alone.
    browser.find_element(By.ID, "api-token-link").click()
    wait_for(lambda: browser.current_url.endswith("/mine/"), "the page of one's own token")
    browser.find_element(By.CSS_SELECTOR, "#content input[type=submit]").click()
    key = browser.find_element(By.CSS_SELECTOR, "#content table code").text
    assert len(key) >= 32, key
    browser.find_element(By.CSS_SELECTOR, "#logout-form button").click()
    browser.find_element(By.LINK_TEXT, "Log in again")  # signed out

    browser.get(f"{base}/api/docs/")
    op_css = "#operations-farms-farms_list"
    status_css = f"{op_css} .live-responses-table .response .response-col_status"
    operation = browser.find_element(By.CSS_SELECTOR, op_css)
    operation.find_element(By.CSS_SELECTOR, "button.opblock-summary-control").click()
    operation.find_element(By.CSS_SELECTOR, "button.try-out__btn").click()
    operation.find_element(By.CSS_SELECTOR, "button.execute").click()
    _text_becomes(browser, status_css, lambda s: s.startswith("401"), "401 without a token")

    browser.find_element(By.CSS_SELECTOR, "button.authorize").click()
    schemes = browser.find_elements(By.CSS_SELECTOR, ".modal-ux .auth-container")
    token_box = next(box for box in schemes if box.text.startswith("tokenAuth"))
    token_box.find_element(By.TAG_NAME, "input").send_keys(f"Token {key}")
    token_box.find_element(By.CSS_SELECTOR, "button.authorize").click()
    browser.find_element(By.CSS_SELECTOR, ".modal-ux button.btn-done").click()
    operation = browser.find_element(By.CSS_SELECTOR, op_css)
    operation.find_element(By.CSS_SELECTOR, "button.execute").click()
    _text_becomes(browser, status_css, lambda s: s.startswith("200"), "200 with the token")
    _text_becomes(
        browser, f"{op_css} .live-responses-table", lambda s: DEMO_FARM in s, "the demo farm"
    )
    curl = browser.find_element(By.CSS_SELECTOR, f"{op_css} .curl-command").text
    assert f"Authorization: Token {key}" in curl  # what an integrator copies
