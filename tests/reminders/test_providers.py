"""Providers are routed by source type through a registry: a third source type plugs in by
registering its provider — the source flow, the setting checks, the executor and the
reconciler pick it up with no switch to edit. Here an ``invoice`` source (due dates kept in
memory) reuses the date-based trigger."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time
from typing import Any

import pytest

from reminders.models import ReminderSetting
from reminders.providers.base import (
    Candidate,
    ChangedScan,
    SourceRef,
    SourceState,
    WindowScan,
    reminder_providers_for,
    reminder_providers_override,
    reminder_source_types,
)
from reminders.providers.document import DateBasedTrigger
from reminders.services.settings import ReminderSettingInvalid, reminder_setting_create
from reminders.services.sync import reminder_source_sync
from scheduler.models import DueWork
from tests.reminders.conftest import NOW, notifications_for, run_due

pytestmark = pytest.mark.django_db

INVOICES: dict[uuid.UUID, dict[str, Any]] = {}


class InvoiceProvider(DateBasedTrigger):
    source_type = "invoice"

    def load(self, guid: uuid.UUID, *, now: datetime) -> SourceState | None:
        invoice = INVOICES.get(guid)
        if invoice is None:
            return None
        farm = invoice["farm"]
        return SourceState(
            source_type="invoice",
            guid=guid,
            pk=1,
            farm_id=farm.pk,
            organization_id=farm.organization_id,
            farm_name=farm.name,
            time_zone=farm.time_zone,
            active=True,
            updated_at=NOW,
            target_date=invoice["due"],
            facts={"document_type": "insurance", "title": invoice["title"], "subject": "x"},
        )

    def setting_applies(self, setting: ReminderSetting, source: SourceState) -> bool:
        return True

    def sources_for_setting(self, setting: ReminderSetting) -> list[uuid.UUID]:
        return list(INVOICES)

    def context(
        self, *, setting: ReminderSetting, source: SourceState, candidate: Candidate
    ) -> dict[str, Any]:
        return {
            "farm_name": source.farm_name,
            "document_title": source.facts["title"],
            "document_type": "Invoice",
            "subject": "the farm",
            "expires_on": source.target_date,
            "days_before": candidate.offset_days,
        }

    def immediate(
        self, *, source: SourceState, candidates: Sequence[Candidate], now: datetime
    ) -> list[Candidate]:
        return []

    def changed(self, scan: ChangedScan) -> list[SourceRef]:
        return []

    def in_window(self, scan: WindowScan) -> list[SourceRef]:
        return []


@pytest.fixture
def invoices() -> Iterator[InvoiceProvider]:
    provider = InvoiceProvider()
    with reminder_providers_override(provider):
        yield provider
    INVOICES.clear()


def test_the_shipped_source_types_are_registered() -> None:
    assert reminder_source_types() == ["document", "endpoint_metric"]
    assert reminder_providers_for("document").trigger_type == "date_based"
    assert reminder_providers_for("endpoint_metric").trigger_type == "threshold_condition"


def test_a_third_source_type_plugs_in_without_a_switch(farm, invoices) -> None:
    setting = reminder_setting_create(
        name="Invoices",
        farm_id=farm.pk,
        source_type="invoice",
        trigger_type="date_based",
        offsets_days=[3],
        send_time=time(9, 0),
        recipients_policy="external_contacts",
        template_name="document_expiry",
        channels=["email"],
        now=NOW,
    )
    guid = uuid.uuid4()
    INVOICES[guid] = {"farm": farm, "due": date(2026, 4, 10), "title": "Feed invoice 42"}
    result = reminder_source_sync(source_type="invoice", source_guid=guid, now=NOW)
    assert [c.action for c in result.changes] == ["inserted"]
    row = DueWork.objects.get()
    assert row.scheduler_key == f"reminder:{setting.guid}:invoice:{guid}:expiry:2026-04-10:3"
    assert run_due(datetime.fromisoformat("2026-04-07T07:00:00+00:00")) == {"completed": 1}
    assert len(notifications_for(row.scheduler_key)) == 1


def test_settings_of_an_unregistered_source_type_are_refused(farm) -> None:
    with pytest.raises(ReminderSettingInvalid, match="no reminder providers"):
        reminder_setting_create(
            name="x",
            farm_id=farm.pk,
            source_type="payroll",
            trigger_type="date_based",
            offsets_days=[1],
            send_time=time(9, 0),
            template_name="document_expiry",
            channels=["email"],
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"trigger_type": "threshold_condition"}, "document sources use date_based"),
        ({"offsets_days": []}, "needs offsets"),
        ({"offsets_days": [1.5]}, "whole days"),
        ({"send_time": None}, "send time"),
        ({"channels": ["sms"]}, "channels"),
    ],
)
def test_inconsistent_settings_are_refused(farm, overrides, message) -> None:
    fields: dict[str, Any] = {
        "name": "x",
        "farm_id": farm.pk,
        "source_type": "document",
        "trigger_type": "date_based",
        "offsets_days": [1],
        "send_time": time(9, 0),
        "template_name": "document_expiry",
        "channels": ["email"],
    }
    fields.update(overrides)
    with pytest.raises(ReminderSettingInvalid, match=message):
        reminder_setting_create(**fields)
