"""The admin in a real browser (headless Chromium over Selenium): a support user of the farm's
organisation releases a held scheduler row with a reason, and once the scheduler has
processed it the admin shows it Completed. Skipped, with the reason, without Chromium."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from scheduler.keys import report_manual_key
from scheduler.models import AutomationType, DueWork, DueWorkTransition
from scheduler.registry import HandlerResult, SchedulerJob, scheduler_handler_override
from scheduler.services import scheduler_ensure, scheduler_process_due
from scheduler.services.finish import scheduler_hold
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.conftest import Tenant, make_tenant

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCHEDULER_URL = "/admin/scheduler/duework/"


class DoneHandler:
    """A report-subscription handler that records each job and succeeds."""

    def __init__(self) -> None:
        self.runs: list[SchedulerJob] = []

    def revalidate(self, job: SchedulerJob) -> None:
        """Nothing to reload: the test row stays valid."""

    def run(self, job: SchedulerJob) -> HandlerResult:
        """Record the job and report where its (pretend) delivery went."""
        self.runs.append(job)
        return HandlerResult(coordinates={"delivered": job.scheduler_key})


def _support_user() -> Tenant:
    """A staff member of the farm's organisation who may view and change scheduler rows."""
    tenant = make_tenant("support")
    codenames = ["view_duework", "change_duework", "operate"]
    tenant.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return tenant


def _held_row(farm_id: int) -> DueWork:
    """Ensure a due row for the farm, then put it on support hold through the services."""
    now = timezone.now()
    key = report_manual_key(subscription_guid=uuid.uuid4(), manual_run_guid=uuid.uuid4())
    ensured = scheduler_ensure(
        key=key,
        scheduled_on=now - timedelta(minutes=1),
        input_hash="1" * 64,
        farm_id=farm_id,
        now=now,
    )
    row = DueWork.objects.get(pk=ensured.scheduler_id)
    held = scheduler_hold(
        scheduler_id=row.pk,
        token=row.version,
        from_status=row.status,
        reason=SchedulerReason.INPUT_HASH_CONFLICT,
        now=now,
        detail="browser test",
    )
    assert held, "the row could not be put on support hold"
    row.refresh_from_db()
    assert row.is_on_support_hold and row.status == SchedulerStatus.PENDING
    return row


def _log_in(driver: Any, base: str, username: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/admin/login/?next={SCHEDULER_URL}")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("pw")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    driver.find_element(By.ID, "changelist")  # landed on the scheduler list


def test_support_releases_a_held_row_and_sees_it_completed(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    tenant = _support_user()
    row = _held_row(tenant.kit.farm.pk)
    base = live_server.url

    _log_in(browser, base, tenant.user.username)
    browser.get(f"{base}{SCHEDULER_URL}?is_on_support_hold__exact=1")
    assert row.scheduler_key in browser.find_element(By.ID, "result_list").text
    browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{row.pk}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("release_hold")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()

    reason = browser.find_element(By.NAME, "reason")  # the intermediate form
    assert row.scheduler_key in browser.find_element(By.ID, "content").text
    reason.send_keys("customer fixed the report input")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][name=apply]").click()
    message = browser.find_element(By.CSS_SELECTOR, "ul.messagelist li").text
    assert "Release support hold: 1 done, 0 skipped" in message

    row.refresh_from_db()
    assert not row.is_on_support_hold and row.status == SchedulerStatus.PENDING
    browser.get(f"{base}{SCHEDULER_URL}?is_on_support_hold__exact=0")
    assert row.scheduler_key in browser.find_element(By.ID, "result_list").text

    handler = DoneHandler()
    with scheduler_handler_override(AutomationType.REPORT_SUBSCRIPTION, handler):
        outcomes = scheduler_process_due()
    assert [job.scheduler_id for job in handler.runs] == [row.pk], outcomes
    row.refresh_from_db()
    assert row.status == SchedulerStatus.COMPLETED

    browser.get(f"{base}{SCHEDULER_URL}?status__exact={SchedulerStatus.COMPLETED}")
    listed = browser.find_element(By.ID, "result_list").text
    assert row.scheduler_key in listed and row.get_status_display() in listed
    browser.get(f"{base}{SCHEDULER_URL}{row.pk}/change/")
    page = browser.find_element(By.ID, "content").text
    assert row.get_status_display() in page and row.scheduler_key in page
    released = DueWorkTransition.objects.get(
        scheduler_id=row.pk, reason_code=SchedulerReason.SUPPORT_RELEASED
    )
    assert "customer fixed the report input" in released.detail  # who and why, audited
    assert tenant.user.username in released.detail
