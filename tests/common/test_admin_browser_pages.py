"""The support pages in a real browser (headless Chromium over Selenium, the fixture of the
scheduler's browser test): the command list, a device's page with its chart and the
diagnostics page load the admin's own stylesheets (no CDN) and show their content. Skipped,
with the reason, without Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.automation.conftest import dispatch, make_intent, time_out
from tests.devices.factories import make_farm

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clock_at_fixture_dates"),
]

INTENT_URL = "/admin/automation/devicecommand/"
HEADER_BG = "rgb(65, 118, 144)"  # #header in the admin's base.css (--header-bg)


def _styled(driver: Any) -> None:
    """The admin's base.css reached the page: its header colour and a stylesheet from the
    app's own static files."""
    header = driver.execute_script(
        "return getComputedStyle(document.getElementById('header')).backgroundColor"
    )
    assert header == HEADER_BG
    sheets = driver.execute_script("return Array.from(document.styleSheets).map(s => s.href || '')")
    assert any(href.endswith("/static/admin/css/base.css") for href in sheets), sheets
    assert all(href.startswith(driver.current_url.split("/admin/")[0]) for href in sheets if href)


def test_command_list_device_chart_and_diagnostics_are_styled(
    browser: Any,
    live_server: Any,
) -> None:
    from selenium.webdriver.common.by import By

    kit = make_farm(prefix="web")
    kit.rule()
    intent = time_out(dispatch(make_intent(kit)))
    User.objects.create_superuser("support", "s@example.com", "pw")
    base = live_server.url
    browser.get(f"{base}/admin/login/?next={INTENT_URL}")
    browser.find_element(By.NAME, "username").send_keys("support")
    browser.find_element(By.NAME, "password").send_keys("pw")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()

    listed = browser.find_element(By.ID, "result_list")
    assert intent.get_status_display() in listed.text and "web-relay" in listed.text
    _styled(browser)

    browser.get(f"{base}/admin/devices/device/{kit.sensor.pk}/change/")
    chart = browser.find_element(By.CSS_SELECTOR, "svg.endpoint-chart")
    assert chart.size["width"] == 640 and chart.size["height"] > 100
    assert len(chart.find_elements(By.CSS_SELECTOR, "g.series")) == 2
    _styled(browser)

    browser.get(f"{base}{INTENT_URL}")
    browser.find_element(By.CSS_SELECTOR, "a[href$='/diagnostics/']").click()
    content = browser.find_element(By.ID, "content").text
    assert "Commands retrying (1)" in content and "web-relay" in content
    _styled(browser)
