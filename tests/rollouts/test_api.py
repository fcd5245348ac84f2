"""Rollouts over the API: an operator creates one (201 with its counters) and pauses,
resumes or cancels it with a reason; a viewer reads but may not write (403); every refused
field is a 400 naming it with nothing created; a move the state refuses is a 409; targets and
the timeline page by cursor; another organisation's rollout is not found."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from automation.states import CommandStatus
from common.models import MemberRole, OrganizationMember
from rollouts.models import Rollout, RolloutTarget
from rollouts.services.drive import rollout_tick
from rollouts.states import RolloutStatus
from tests.common.auth import token_client
from tests.conftest import FIXTURE_NOW
from tests.rollouts.fleet import Fleet, finish, make_fleet, sent_commands

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
URL = "/api/v1/rollouts/"


def _member(fleet: Fleet, name: str, role: str) -> User:
    user = User.objects.create_user(username=name, password="pw")
    OrganizationMember.objects.create(user=user, organization=fleet.organization, role=role)
    return user


@pytest.fixture
def fleet(db: None) -> Fleet:
    return make_fleet(farms=2, per_farm=3)


@pytest.fixture
def operator(fleet: Fleet) -> APIClient:
    return token_client(_member(fleet, "olga", MemberRole.OPERATOR))


@pytest.fixture
def viewer(fleet: Fleet) -> APIClient:
    return token_client(_member(fleet, "vera", MemberRole.VIEWER))


def _body(fleet: Fleet, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "close vents before the storm",
        "farm_ids": [f.pk for f in fleet.farms],
        "profile_id": fleet.profile.pk,
        "endpoint_key": "vent",
        "value": False,
        "reason": "storm warning",
        "canary_size": 2,
    }
    body.update(overrides)
    return body


def _create(client: APIClient, body: dict[str, Any], key: str | None = None) -> Any:
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(URL, body, format="json", **extra)


def _refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    fields: dict[str, Any] = body["fields"]
    return fields


def test_an_operator_creates_a_rollout_and_reads_it_back(fleet: Fleet, operator: APIClient) -> None:
    response = _create(operator, _body(fleet))
    assert response.status_code == 201, response.content
    made = response.json()
    assert (made["state"], made["requested_by"], made["canary_left"]) == ("running", "olga", 2)
    assert made["counters"]["pending"] == 6 and made["counters"]["applied"] == 0
    assert sorted(made["farm_ids"]) == sorted(f.pk for f in fleet.farms)
    assert (made["profile_id"], made["device_ids"], made["tripped"]) == (fleet.profile.pk, [], None)
    assert (made["base_rate_per_minute"], made["increment_factor"]) == (10.0, 2.0)  # defaults
    shown = operator.get(f"{URL}{made['id']}/").json()
    assert shown == made
    timeline = operator.get(f"{URL}{made['id']}/timeline/").json()
    assert [(t["from_state"], t["to_state"], t["actor"]) for t in timeline["results"]] == [
        ("", "running", "olga")
    ]


def test_an_idempotency_key_replays_the_first_answer(fleet: Fleet, operator: APIClient) -> None:
    first = _create(operator, _body(fleet), key="storm-1")
    again = _create(operator, _body(fleet), key="storm-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert Rollout.objects.count() == 1
    assert _create(operator, _body(fleet, name="other"), key="storm-1").status_code == 422


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"device_ids": [999_999]}, "device_ids"),
        ({"endpoint_key": "nope"}, "endpoint_key"),
        ({"value": 3}, "value"),
        ({"value": "open"}, "value"),
        ({"base_rate_per_minute": 0.5}, "base_rate_per_minute"),
        ({"max_rate_per_minute": 20_000}, "max_rate_per_minute"),
        ({"base_rate_per_minute": 50, "max_rate_per_minute": 20}, "max_rate_per_minute"),
        ({"increment_factor": 1.0}, "increment_factor"),
        ({"increment_factor": 9}, "increment_factor"),
        ({"max_live_per_farm": 0}, "max_live_per_farm"),
        ({"canary_size": 0}, "canary_size"),
        ({"priority": 10_000}, "priority"),
        ({"mode": "sometimes"}, "mode"),
        ({"end_behaviour": "explode"}, "end_behaviour"),
        ({"abort_criteria": [{"outcome": "failed", "min_finished": 5}]}, "abort_criteria"),
        (
            {"abort_criteria": [{"outcome": "failed", "min_finished": 5, "threshold_pct": 150}]},
            "abort_criteria",
        ),
        ({"start_local": "2026-11-29T10:00"}, "start_local"),  # 11:00 in Berlin: 1 h ago
        ({"start_local": "2026-12-01T22:00+01:00"}, "start_local"),
        ({"start_local": "0001-01-01T00:00"}, "start_local"),
        ({"start_local": "2026-12-02T22:00", "end_local": "2026-12-02T21:00"}, "end_local"),
        ({"name": "  "}, "name"),
        ({"reason": ""}, "reason"),
        ({"farm_ids": []}, "farm_ids"),
        ({"farm_ids": [999_999]}, "farm_ids"),
        ({"profile_id": 999_999}, "profile_id"),
        # Wrong JSON types: the field's own 400, never a 500.
        ({"farm_ids": "1"}, "farm_ids"),
        ({"farm_ids": [1.5]}, "farm_ids"),
        ({"profile_id": "1"}, "profile_id"),
        ({"name": 7}, "name"),
        ({"canary_size": True}, "canary_size"),
        ({"base_rate_per_minute": "fast"}, "base_rate_per_minute"),
        ({"abort_criteria": {"outcome": "failed"}}, "abort_criteria"),
    ],
)
def test_a_refused_field_is_named_and_nothing_is_created(
    fleet: Fleet, operator: APIClient, overrides: dict[str, Any], field: str
) -> None:
    fields = _refused(_create(operator, _body(fleet, **overrides)))
    assert field in fields, fields
    assert Rollout.objects.count() == 0 and RolloutTarget.objects.count() == 0


def test_a_selector_matching_no_endpoint_is_refused(fleet: Fleet, operator: APIClient) -> None:
    empty = make_fleet(farms=1, per_farm=0)
    OrganizationMember.objects.create(
        user=User.objects.get(username="olga"),
        organization=empty.organization,
        role=MemberRole.OPERATOR,
    )
    fields = _refused(_create(operator, _body(empty)))
    assert "no device endpoint" in fields["farm_ids"][0]
    assert Rollout.objects.count() == 0


def test_farms_of_two_organisations_are_refused(fleet: Fleet, operator: APIClient) -> None:
    other = make_fleet(farms=1, per_farm=1)
    OrganizationMember.objects.create(
        user=User.objects.get(username="olga"),
        organization=other.organization,
        role=MemberRole.OPERATOR,
    )
    body = _body(fleet, farm_ids=[fleet.farms[0].pk, other.farms[0].pk])
    assert "farm_ids" in _refused(_create(operator, body))


def test_endpoints_a_live_rollout_targets_are_refused(fleet: Fleet, operator: APIClient) -> None:
    assert _create(operator, _body(fleet, farm_ids=[fleet.farms[0].pk])).status_code == 201
    fields = _refused(_create(operator, _body(fleet)))
    assert "already targeted" in fields["endpoint_key"][0]
    assert Rollout.objects.count() == 1
    # The other farm's devices alone are free.
    assert _create(operator, _body(fleet, farm_ids=[fleet.farms[1].pk])).status_code == 201


def test_a_start_within_the_grace_or_ahead_is_taken(fleet: Fleet, operator: APIClient) -> None:
    # FIXTURE_NOW is 13:00 in Berlin: 12:58 is within the five minutes' grace.
    assert FIXTURE_NOW.hour == 12
    made = _create(operator, _body(fleet, start_local="2026-11-29T12:58"))
    assert made.status_code == 201, made.content
    assert made.json()["state"] == "scheduled"


def test_a_viewer_reads_but_may_not_write(
    fleet: Fleet, operator: APIClient, viewer: APIClient
) -> None:
    assert _create(viewer, _body(fleet)).status_code == 403
    assert Rollout.objects.count() == 0
    rollout = _create(operator, _body(fleet)).json()
    assert viewer.get(URL).json()["results"][0]["id"] == rollout["id"]
    assert viewer.get(f"{URL}{rollout['id']}/targets/").status_code == 200
    paused = viewer.post(f"{URL}{rollout['id']}/pause/", {"reason": "x"}, format="json")
    assert paused.status_code == 403 and paused.json()["code"] == "permission_denied"
    assert Rollout.objects.get().status == RolloutStatus.RUNNING


def test_pause_resume_and_cancel_with_reasons(fleet: Fleet, operator: APIClient) -> None:
    rollout_id = _create(operator, _body(fleet)).json()["id"]

    def move(action: str, reason: str = "checking the canary") -> Any:
        return operator.post(f"{URL}{rollout_id}/{action}/", {"reason": reason}, format="json")

    assert "reason" in _refused(move("pause", reason=""))
    assert "reason" in _refused(operator.post(f"{URL}{rollout_id}/pause/", {}, format="json"))
    paused = move("pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert move("pause").status_code == 409
    resumed = move("resume")
    assert resumed.status_code == 200 and resumed.json()["state"] == "running"
    refused = move("resume")
    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    cancelled = move("cancel", reason="storm passed")
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["ended_at"] is not None
    assert body["counters"]["skipped"] == 6 and body["counters"]["pending"] == 0
    assert move("cancel").status_code == 409
    timeline = operator.get(f"{URL}{rollout_id}/timeline/").json()["results"]
    assert [t["to_state"] for t in timeline] == ["running", "paused", "running", "cancelled"]
    assert timeline[-1]["reason"] == "by olga: storm passed"
    assert timeline[-1]["actor"] == "olga"


def test_targets_page_by_cursor_with_their_command_state(fleet: Fleet, operator: APIClient) -> None:
    rollout_id = _create(operator, _body(fleet)).json()["id"]
    rollout_tick(rollout_id, now=FIXTURE_NOW)  # the canary: two commands
    canary = sent_commands(Rollout.objects.get())
    finish(canary[:1], CommandStatus.APPLIED, FIXTURE_NOW)
    url = f"{URL}{rollout_id}/targets/"
    with CaptureQueriesContext(connection) as one:
        operator.get(url, {"page_size": 1})
    with CaptureQueriesContext(connection) as four:
        page = operator.get(url, {"page_size": 4}).json()
    assert len(four) == len(one)  # one query for the page, whatever its size
    second = operator.get(page["next"]).json()
    seen = page["results"] + second["results"]
    assert len(page["results"]) == 4 and len(second["results"]) == 2 and second["next"] is None
    assert [t["id"] for t in seen] == sorted(t["id"] for t in seen)
    first = seen[0]
    assert (first["state"], first["wave"], first["command"]) == ("applied", 1, canary[0])
    assert first["device_serial"].startswith("VENT-") and first["farm_id"] == fleet.farms[0].pk
    assert [t["state"] for t in seen[1:]] == ["pending_dispatch"] + ["pending"] * 4
    listed = operator.get(URL).json()["results"][0]
    assert listed["counters"]["applied"] == 1 and listed["counters"]["pending"] == 4
    assert listed["waves"] == 1


def test_a_page_of_rollouts_counts_in_one_query(fleet: Fleet, operator: APIClient) -> None:
    for farm in fleet.farms:
        assert _create(operator, _body(fleet, farm_ids=[farm.pk])).status_code == 201
    with CaptureQueriesContext(connection) as one:
        operator.get(URL, {"page_size": 1})
    with CaptureQueriesContext(connection) as two:
        page = operator.get(URL, {"page_size": 2}).json()
    assert len(two) == len(one)
    assert [r["counters"]["pending"] for r in page["results"]] == [3, 3]
    assert page["results"][0]["id"] > page["results"][1]["id"]  # newest first


def test_another_organisations_rollout_is_not_found(fleet: Fleet, operator: APIClient) -> None:
    rollout_id = _create(operator, _body(fleet)).json()["id"]
    other = make_fleet(farms=1, per_farm=1)
    outsider = token_client(_member(other, "otto", MemberRole.ADMIN))
    assert outsider.get(URL).json()["results"] == []
    for suffix in ("", "targets/", "timeline/"):
        assert outsider.get(f"{URL}{rollout_id}/{suffix}").status_code == 404
    moved = outsider.post(f"{URL}{rollout_id}/cancel/", {"reason": "mine"}, format="json")
    assert moved.status_code == 404 and moved.json()["code"] == "not_found"
    # Nor may an outsider aim a rollout at the farms.
    assert "farm_ids" in _refused(_create(outsider, _body(fleet)))
    assert Rollout.objects.get().status == RolloutStatus.RUNNING
