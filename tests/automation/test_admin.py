"""Support's command admin: an intent shows its timeline, and marking it failed asks for a
reason and is guarded."""

from __future__ import annotations

import pytest
from django.test import Client

from automation.models import CommandTransition, DeviceCommand
from automation.states import CommandStatus
from tests.automation.conftest import dispatch, make_intent
from tests.scheduler.test_admin import _act

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
INTENT_URL = "/admin/automation/devicecommand/"


def test_intent_page_shows_timeline_and_mark_failed_is_guarded(support: Client) -> None:
    from tests.devices.factories import make_farm

    kit = make_farm(prefix="adm")
    kit.rule()
    intent = dispatch(make_intent(kit))
    page = support.get(f"{INTENT_URL}{intent.pk}/change/")
    assert b"pending_dispatch -&gt; dispatched" in page.content
    _act(support, INTENT_URL, "mark_failed", [intent.pk], "relay wired wrong")
    intent = DeviceCommand.objects.get(pk=intent.pk)
    assert intent.status == CommandStatus.FAILED and intent.status_reason == "manual"
    assert intent.inflight_endpoint_id is None
    last = CommandTransition.objects.filter(command=intent).order_by("-pk").first()
    assert last is not None and last.detail == "by support: relay wired wrong"
    page = _act(support, INTENT_URL, "mark_failed", [intent.pk], "again")
    assert b"0 done, 1 skipped" in page.content
