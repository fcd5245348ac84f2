"""Alarms over the API: any member lists them (by cursor, filtered by farm, status and
severity); an operator acknowledges and clears with a comment, audited with their user name;
a viewer may not (403); a bad filter or comment is a 400 naming the field with nothing
written; a move the status refuses is a 409; another organisation's alarm is not found."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from alarms.models import Alarm, AlarmTransition
from alarms.services import alarm_raise
from common.models import MemberRole, OrganizationMember
from devices.models import Farm
from tests.common.auth import token_client
from tests.devices.factories import FarmFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/alarms/"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _member(farm: Farm, name: str, role: str) -> APIClient:
    user = User.objects.create_user(username=name, password="pw")
    OrganizationMember.objects.create(user=user, organization=farm.organization, role=role)
    return token_client(user)


def _raise(farm: Farm, source_id: int, severity: str = "major") -> int:
    return alarm_raise(
        farm_id=farm.pk,
        source="device",
        source_id=source_id,
        type="device_offline",
        severity=severity,
        actor="device health",
        now=NOW,
    )


@pytest.fixture
def farms(db: None) -> tuple[Farm, Farm]:
    first = FarmFactory()
    return first, FarmFactory(organization=first.organization)


def _ids(answer: Any) -> list[int]:
    assert answer.status_code == 200, answer.content
    return [row["id"] for row in answer.json()["results"]]


def test_viewers_list_newest_first_filtered_by_farm_status_and_severity(farms) -> None:
    north, south = farms
    a = _raise(north, 1, "critical")
    b = _raise(north, 2, "minor")
    c = _raise(south, 3, "critical")
    elsewhere = _raise(FarmFactory(), 4, "critical")
    viewer = _member(north, "vera", MemberRole.VIEWER)
    assert _ids(viewer.get(URL)) == [c, b, a]
    assert _ids(viewer.get(URL, {"farm": north.pk})) == [b, a]
    assert _ids(viewer.get(URL, {"severity": "critical"})) == [c, a]
    Alarm.objects.filter(pk=b).update(status="acknowledged")
    assert _ids(viewer.get(URL, {"status": "acknowledged"})) == [b]
    assert viewer.get(f"{URL}{elsewhere}/").status_code == 404
    page = viewer.get(URL, {"page_size": 2}).json()
    assert len(page["results"]) == 2 and page["next"]


@pytest.mark.parametrize(
    ("query", "field"), [({"severity": "loud"}, "severity"), ({"status": "open"}, "status")]
)
def test_an_unknown_filter_value_is_a_400_naming_it(farms, query, field) -> None:
    viewer = _member(farms[0], "vera", MemberRole.VIEWER)
    answer = viewer.get(URL, query)
    assert answer.status_code == 400
    assert field in answer.json()["fields"]


def test_an_operator_acknowledges_then_clears_each_audited_with_their_name(farms) -> None:
    alarm_id = _raise(farms[0], 1)
    operator = _member(farms[0], "olga", MemberRole.OPERATOR)
    answer = operator.post(f"{URL}{alarm_id}/acknowledge/", {"comment": "on it"}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "acknowledged"
    assert answer.json()["acknowledged_by"] == "olga"
    again = operator.post(f"{URL}{alarm_id}/acknowledge/", {"comment": "twice"}, format="json")
    assert again.status_code == 409
    cleared = operator.post(f"{URL}{alarm_id}/clear/", {"comment": "fixed"}, format="json")
    assert cleared.status_code == 200 and cleared.json()["cleared_by"] == "olga"
    trail = operator.get(f"{URL}{alarm_id}/timeline/").json()["results"]
    assert [(r["to_status"], r["actor"], r["comment"]) for r in trail] == [
        ("active", "device health", ""),
        ("acknowledged", "olga", "on it"),
        ("cleared", "olga", "fixed"),
    ]


def test_a_viewer_may_not_acknowledge_or_clear(farms) -> None:
    alarm_id = _raise(farms[0], 1)
    viewer = _member(farms[0], "vera", MemberRole.VIEWER)
    for move in ("acknowledge", "clear"):
        answer = viewer.post(f"{URL}{alarm_id}/{move}/", {"comment": "mine"}, format="json")
        assert answer.status_code == 403
    assert Alarm.objects.get(pk=alarm_id).status == "active"
    assert AlarmTransition.objects.count() == 1


@pytest.mark.parametrize(
    "body", [{}, {"comment": ""}, {"comment": "   "}, {"comment": "x" * 501}, {"comment": 5}]
)
def test_a_missing_empty_oversized_or_typed_comment_is_a_400_and_nothing_moves(farms, body) -> None:
    alarm_id = _raise(farms[0], 1)
    operator = _member(farms[0], "olga", MemberRole.OPERATOR)
    answer = operator.post(f"{URL}{alarm_id}/acknowledge/", body, format="json")
    assert answer.status_code == 400
    assert "comment" in answer.json()["fields"]
    assert Alarm.objects.get(pk=alarm_id).status == "active"
