"""An Idempotency-Key replays its first response only for the same request (method, path and
body, compared in canonical form); another body under the key is a 422 that writes nothing.
A key counts for API_IDEMPOTENCY_TTL_S, after which it is new, and beat prunes the records."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from automation.models import AutomationRule
from common.api import idempotency_records_prune
from common.models import ApiIdempotencyRecord
from config.beat import beat_schedule
from config.celery import app as celery_app
from tests.automation.test_api import _client, _rule
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db
URL = "/api/v1/rules/"


def test_a_key_reused_with_another_body_is_a_422(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    first = client.post(URL, _rule(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201
    other = client.post(URL, _rule(alpha, name="other"), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 422
    assert other.json()["code"] == "idempotency_key_reused"
    assert "different request" in other.json()["detail"]
    assert list(AutomationRule.objects.values_list("name", flat=True)) == ["cool down"]


def test_the_same_body_in_another_key_order_and_spacing_is_a_replay(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    body = _rule(alpha)
    first = client.post(URL, json.dumps(body), content_type="application/json",
                        HTTP_IDEMPOTENCY_KEY="k-2")  # fmt: skip
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2)
    again = client.post(URL, reordered, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert AutomationRule.objects.count() == 1


def test_a_key_older_than_its_lifetime_is_a_new_request(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    assert (
        client.post(URL, _rule(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-3").status_code == 201
    )
    later = timezone.now() + timedelta(seconds=settings.API_IDEMPOTENCY_TTL_S + 60)
    with time_machine.travel(later, tick=False):
        again = client.post(
            URL, _rule(alpha, name="next day"), format="json", HTTP_IDEMPOTENCY_KEY="k-3"
        )
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert AutomationRule.objects.count() == 2
    assert ApiIdempotencyRecord.objects.get(key="k-3").response_body["name"] == "next day"


def test_beat_prunes_expired_records_only(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    now = timezone.now()
    with time_machine.travel(now - timedelta(seconds=settings.API_IDEMPOTENCY_TTL_S + 1)):
        client.post(URL, _rule(alpha, name="old"), format="json", HTTP_IDEMPOTENCY_KEY="old")
    client.post(URL, _rule(alpha, name="new"), format="json", HTTP_IDEMPOTENCY_KEY="new")
    assert idempotency_records_prune(now=now, batch=1) == 1
    assert list(ApiIdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]
    celery_app.loader.import_default_modules()
    entry = beat_schedule()["api-idempotency-records-prune"]
    assert entry.task in celery_app.tasks and entry.expires_s > 0
