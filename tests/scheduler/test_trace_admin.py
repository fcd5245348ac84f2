"""Support reaches a row's trace from its page: the row links to its execution records and its
blob; the blob streams through the storage API; a staff user sees only their organisations'
rows, records and blobs (another organisation's do not exist: 404 / not listed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.base import ContentFile
from django.test import Client
from django.utils import timezone

from scheduler.models import DueWork, TraceRecord
from scheduler.trace_storage import trace_storage
from tests.conftest import Tenant
from tests.scheduler.factories import DueWorkFactory

pytestmark = pytest.mark.django_db
ROWS = "/admin/scheduler/duework/"
JOBS = "/admin/scheduler/tracerecord/"


def _traced_row(key: str, farm: Any = None) -> tuple[DueWork, TraceRecord]:
    row = DueWorkFactory(scheduler_key=key, farm=farm, status="completed")
    name = trace_storage().save(
        f"automation-scheduler/{row.pk}/v1-completed.json", ContentFile(b'{"rendered": "hi"}')
    )
    DueWork.objects.filter(pk=row.pk).update(trace_blob_name=name)
    row.refresh_from_db()
    now = timezone.now()
    job = TraceRecord.objects.create(
        scheduler_id=row.pk,
        automation_type=row.automation_type,
        scheduler_key=key,
        token=1,
        attempt=1,
        outcome="completed",
        started_at=now,
        finished_at=now + timedelta(milliseconds=5),
        duration_ms=5,
        worker="host:1",
        coordinates={"notificationId": 7},
        trace_blob_name=name,
        farm_id=farm.pk if farm else None,
        organization_id=farm.organization_id if farm else None,
    )
    return row, job


def _body(response: Any) -> bytes:
    return b"".join(response.streaming_content)


def test_a_rows_page_links_to_its_records_and_streams_its_blob(support: Client) -> None:
    row, job = _traced_row("report-subscription:t:manual:1")
    _traced_row("report-subscription:other:manual:1")
    page = support.get(f"{ROWS}{row.pk}/change/").content.decode()
    records = f"{JOBS}?scheduler_id={row.pk}"
    blob = f"{ROWS}{row.pk}/trace-blob/"
    assert f'href="{records}"' in page and f'href="{blob}"' in page

    listed = support.get(records)
    assert listed.status_code == 200
    assert b"report-subscription:t:manual:1" in listed.content
    assert b"report-subscription:other:manual:1" not in listed.content

    streamed = support.get(blob)
    assert streamed.status_code == 200 and streamed["Content-Type"] == "application/json"
    assert _body(streamed) == b'{"rendered": "hi"}'
    record_page = support.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert f'href="{JOBS}{job.pk}/trace-blob/"' in record_page
    assert f'href="{ROWS}{row.pk}/change/"' in record_page
    assert _body(support.get(f"{JOBS}{job.pk}/trace-blob/")) == b'{"rendered": "hi"}'


def test_a_pruned_or_missing_blob_is_a_404(support: Client) -> None:
    row, _ = _traced_row("report-subscription:gone:manual:1")
    trace_storage().delete(row.trace_blob_name)
    assert support.get(f"{ROWS}{row.pk}/trace-blob/").status_code == 404
    bare = DueWorkFactory()
    assert support.get(f"{ROWS}{bare.pk}/trace-blob/").status_code == 404


def test_records_are_read_only(support: Client) -> None:
    _, job = _traced_row("report-subscription:ro:manual:1")
    support.post(f"{JOBS}{job.pk}/change/", {"outcome": "failed"})
    assert TraceRecord.objects.get(pk=job.pk).outcome == "completed"
    assert support.get(f"{JOBS}add/").status_code == 403


def test_staff_see_only_their_organisations_trace(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    mine, my_job = _traced_row("report-subscription:mine:manual:1", alpha.kit.farm)
    theirs, their_job = _traced_row("report-subscription:theirs:manual:1", beta.kit.farm)
    codenames = ["view_duework", "view_tracerecord"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.login(username="alpha", password="pw")

    assert _body(client.get(f"{ROWS}{mine.pk}/trace-blob/")) == b'{"rendered": "hi"}'
    assert client.get(f"{ROWS}{theirs.pk}/trace-blob/").status_code == 404
    assert client.get(f"{JOBS}{their_job.pk}/trace-blob/").status_code == 404
    assert client.get(f"{JOBS}{my_job.pk}/trace-blob/").status_code == 200
    listed = client.get(JOBS).content
    assert b"report-subscription:mine:manual:1" in listed
    assert b"report-subscription:theirs:manual:1" not in listed
    assert client.get(f"{JOBS}?scheduler_id={theirs.pk}").content.count(b"theirs:manual") == 0

    anonymous = Client()
    assert anonymous.get(f"{ROWS}{mine.pk}/trace-blob/").status_code == 302  # to the login
