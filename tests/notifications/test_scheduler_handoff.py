"""The scheduler hands off to this pipeline: a handler's run calls ``notification_schedule``
with the row's key, the row completes with the coordinates in DispatchResultJson, and a lost
claim rolls the notifications back with the completion."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.core import mail

from notifications.models import Notification
from notifications.services import Attachment, notification_schedule
from scheduler.keys import report_manual_key, scheduler_input_hash
from scheduler.models import AutomationType, DueWork
from scheduler.registry import HandlerResult, SchedulerJob, scheduler_handler_override
from scheduler.services import scheduler_claim_due, scheduler_ensure, scheduler_execute
from tests.notifications.conftest import NOW

pytestmark = pytest.mark.django_db


@dataclass
class ReportHandler:
    """What a report-subscription handler does at due time: hand off, return coordinates."""

    farm_id: int
    template: str
    runs: list[SchedulerJob] = field(default_factory=list)

    def revalidate(self, job: SchedulerJob) -> None:
        return None

    def run(self, job: SchedulerJob) -> HandlerResult:
        self.runs.append(job)
        coordinates = notification_schedule(
            source_key=job.scheduler_key,
            farm_id=self.farm_id,
            recipient_policy="farm_managers",
            template_name=self.template,
            channels=["email", "inbox"],
            context={
                "title": "Weekly report",
                "who": "managers",
                "due_on": job.now.date(),
                "due_at": job.now,
            },
            attachments=[Attachment("report.csv", "text/csv", "farm,yield\nA,12\n")],
            now=job.now,
        )
        return HandlerResult(coordinates={"notifications": coordinates})


@pytest.fixture
def report_handler(team, due_template) -> Iterator[ReportHandler]:
    handler = ReportHandler(team.farm.pk, due_template)
    with scheduler_handler_override(AutomationType.REPORT_SUBSCRIPTION, handler):
        yield handler


def ensure_due() -> None:
    scheduler_ensure(
        key=report_manual_key(subscription_guid=uuid.uuid4(), manual_run_guid=uuid.uuid4()),
        scheduled_on=NOW - timedelta(minutes=1),
        input_hash=scheduler_input_hash("weekly"),
        now=NOW,
    )


def test_completed_row_stores_the_notification_coordinates(
    report_handler, eager_celery, django_capture_on_commit_callbacks
):
    ensure_due()
    [claimed] = scheduler_claim_due(now=NOW, limit=10)
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            scheduler_execute(scheduler_id=claimed.scheduler_id, token=claimed.token, now=NOW)
            == "completed"
        )
    row = DueWork.objects.get(pk=claimed.scheduler_id)
    coordinates = row.dispatch_result_json["notifications"]
    assert {(c["channel"], c["status"]) for c in coordinates} == {
        ("email", "queued"),
        ("inbox", "queued"),
    }
    assert len(coordinates) == 4  # owner and manager, email and inbox
    ids = [c["notification_id"] for c in coordinates]
    assert set(
        Notification.objects.filter(source_key=row.scheduler_key).values_list("pk", flat=True)
    ) == set(ids)
    assert Notification.objects.filter(pk__in=ids, status="sent").count() == 4
    assert len(mail.outbox) == 2 and mail.outbox[0].attachments[0][0] == "report.csv"


def test_a_claim_lost_before_completion_rolls_the_hand_off_back(
    report_handler, django_capture_on_commit_callbacks
):
    ensure_due()
    [claimed] = scheduler_claim_due(now=NOW, limit=10)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = scheduler_execute(
            scheduler_id=claimed.scheduler_id, token=claimed.token + 7, now=NOW
        )
    assert outcome == "lost"
    assert not Notification.objects.exists()
