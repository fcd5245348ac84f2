"""Support's rollout pages: the list shows state and progress, a rollout's page its counters
per target state, progress, tripped criterion and timeline; pause, resume and cancel ask for
a reason and need the operator role in the rollout's organisation; a rollout's command shows
its origin in the command admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from automation.states import CommandStatus
from common.models import MemberRole, OrganizationMember
from rollouts.models import Rollout, RolloutTransition
from rollouts.services.drive import rollout_tick
from rollouts.states import RolloutStatus
from tests.rollouts.fleet import Fleet, finish, make_fleet, sent_commands

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("staff_groups")]
URL = "/admin/rollouts/rollout/"
TARGETS_URL = "/admin/rollouts/rollouttarget/"


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _now() -> datetime:
    return timezone.now().astimezone(UTC)


def _staff(fleet: Fleet, role: str) -> Client:
    """A staff user of ``role``'s group and role in the fleet's organisation, logged in."""
    name = f"{role}-{User.objects.count()}"
    user = User.objects.create_user(username=name, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    OrganizationMember.objects.create(user=user, organization=fleet.organization, role=role)
    client = Client()
    assert client.login(username=name, password="pw")
    return client


def _act(client: Client, action: str, rollout: Rollout, reason: str) -> Any:
    data = {"action": action, "_selected_action": [str(rollout.pk)], "apply": "1"}
    return client.post(URL, {**data, "reason": reason}, follow=True)


def _state(rollout: Rollout) -> str:
    return Rollout.objects.get(pk=rollout.pk).status


def _half_done(olga: User) -> tuple[Fleet, Rollout]:
    """A running rollout of 6 targets: a canary of 2 applied and 1 failed, 3 pending."""
    fleet = make_fleet(per_farm=6)
    now = _now()
    rollout = fleet.rollout(olga, now=now, canary_size=3)
    rollout_tick(rollout.pk, now=now + timedelta(seconds=1))
    canary = sent_commands(rollout)
    assert len(canary) == 3
    finish(canary[:2], CommandStatus.APPLIED, now + timedelta(seconds=2))
    finish(canary[2:], CommandStatus.FAILED, now + timedelta(seconds=2))
    return fleet, Rollout.objects.get(pk=rollout.pk)


def test_the_list_and_the_page_show_counters_and_progress(olga: User) -> None:
    fleet, rollout = _half_done(olga)
    operator = _staff(fleet, MemberRole.OPERATOR)
    listing = operator.get(URL)
    assert listing.status_code == 200
    body = listing.content.decode()
    assert rollout.name in body and "3 / 6 (50%)" in body
    page = operator.get(f"{URL}{rollout.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<progress value="3" max="6">' in html.replace(' style="width: 8em"', "")
    assert "<td>applied</td><td><a" in html and "<td>failed</td><td><a" in html
    assert f"?rollout__id__exact={rollout.pk}&amp;command__status__exact=applied" in html
    assert "<td>pending</td><td><a" in html  # 3 pending, linked to their list
    assert "Pause…" in html and "Cancel…" in html and "Resume…" not in html
    assert '<div class="readonly">none</div>' in html  # no abort criterion tripped
    assert '<div class="readonly">false</div>' in html  # the value as JSON
    targets = operator.get(f"{TARGETS_URL}?rollout__id__exact={rollout.pk}")
    assert targets.status_code == 200
    assert targets.content.decode().count('class="field-state"') == 6


def test_pause_then_resume_with_a_reason(olga: User) -> None:
    fleet, rollout = _half_done(olga)
    operator = _staff(fleet, MemberRole.OPERATOR)
    asked = operator.post(
        URL, {"action": "pause", "_selected_action": [str(rollout.pk)], "index": "0"}
    )
    assert asked.status_code == 200 and b'name="reason"' in asked.content
    done = _act(operator, "pause", rollout, "farm visit tomorrow")
    assert b"Pause: 1 done, 0 refused" in done.content
    assert _state(rollout) == RolloutStatus.PAUSED
    page = operator.get(f"{URL}{rollout.pk}/change/").content.decode()
    assert "Resume…" in page and "Pause…" not in page
    assert "running → paused" in page and "farm visit tomorrow" in page
    assert "created → running" in page and "wave 1: 3 started" in page
    _act(operator, "resume", rollout, "visit done")
    assert _state(rollout) == RolloutStatus.RUNNING
    move = RolloutTransition.objects.filter(rollout=rollout).order_by("-pk").first()
    assert move is not None and move.to_status == RolloutStatus.RUNNING
    assert move.actor is not None and move.actor.username.startswith("operator")
    assert move.reason.endswith("visit done")
    refused = _act(operator, "resume", rollout, "again")
    assert b"0 done, 1 refused" in refused.content
    assert _state(rollout) == RolloutStatus.RUNNING


def test_a_move_without_a_reason_is_refused(olga: User) -> None:
    fleet, rollout = _half_done(olga)
    operator = _staff(fleet, MemberRole.OPERATOR)
    for blank in ("", "   "):
        page = _act(operator, "cancel", rollout, blank)
        assert page.status_code == 200 and b"This field is required" in page.content
    assert _state(rollout) == RolloutStatus.RUNNING
    assert not RolloutTransition.objects.filter(rollout=rollout, to_status="cancelled").exists()


def test_a_viewer_sees_but_cannot_act(olga: User) -> None:
    fleet, rollout = _half_done(olga)
    viewer = _staff(fleet, MemberRole.VIEWER)
    page = viewer.get(f"{URL}{rollout.pk}/change/")
    assert page.status_code == 200 and b"Pause" not in page.content
    listing = viewer.get(URL)
    assert listing.status_code == 200 and b'value="pause"' not in listing.content
    _act(viewer, "pause", rollout, "not mine to pause")
    _act(viewer, "cancel", rollout, "not mine to cancel")
    assert _state(rollout) == RolloutStatus.RUNNING
    # Another organisation's operator does not even see it.
    other = _staff(make_fleet(per_farm=1), MemberRole.OPERATOR)
    assert other.get(f"{URL}{rollout.pk}/change/").status_code in (302, 404)
    _act(other, "pause", rollout, "not ours")
    assert _state(rollout) == RolloutStatus.RUNNING


def test_an_aborted_rollout_shows_its_criterion_and_no_buttons(olga: User) -> None:
    fleet = make_fleet(per_farm=4)
    now = _now()
    criteria = [{"outcome": "failed", "min_finished": 2, "threshold_pct": 50}]
    rollout = fleet.rollout(olga, now=now, canary_size=2, abort_criteria=criteria)
    rollout_tick(rollout.pk, now=now + timedelta(seconds=1))
    finish(sent_commands(rollout), CommandStatus.FAILED, now + timedelta(seconds=2))
    rollout_tick(rollout.pk, now=now + timedelta(seconds=3))
    assert _state(rollout) == RolloutStatus.ABORTED
    operator = _staff(fleet, MemberRole.OPERATOR)
    html = operator.get(f"{URL}{rollout.pk}/change/").content.decode()
    assert "failed ≥ 50% of ≥ 2 finished: 2 of 2 finished (100.0%)" in html
    assert "Pause…" not in html and "Cancel…" not in html
    assert "4 / 4 (100%)" in html  # two failed, two skipped when it aborted
    # Its bar is not a completed one's: marked, coloured and labelled, on the page and list.
    listing = operator.get(URL).content.decode()
    for shown in (html, listing):
        assert 'class="rollout-progress rollout-aborted"' in shown
        assert ">aborted </strong>" in shown and "accent-color" in shown


def test_a_cancelled_rollouts_bar_says_so_and_a_running_ones_does_not(olga: User) -> None:
    fleet, rollout = _half_done(olga)
    operator = _staff(fleet, MemberRole.OPERATOR)
    running = operator.get(URL).content.decode()
    assert 'class="rollout-progress rollout-running"><progress' in running
    _act(operator, "cancel", rollout, "wrong value")
    assert _state(rollout) == RolloutStatus.CANCELLED
    html = operator.get(f"{URL}{rollout.pk}/change/").content.decode()
    assert 'class="rollout-progress rollout-cancelled"' in html and ">cancelled </strong>" in html


def test_a_rollouts_command_shows_its_origin_and_wave(olga: User, support: Client) -> None:
    fleet = make_fleet(per_farm=2)
    now = _now()
    rollout = fleet.rollout(olga, now=now, canary_size=1)
    rollout_tick(rollout.pk, now=now + timedelta(seconds=1))
    (command,) = sent_commands(rollout)
    listing = support.get("/admin/automation/devicecommand/?origin__exact=rollout")
    assert listing.status_code == 200 and f">{command}<".encode() in listing.content
    page = support.get(f"/admin/automation/devicecommand/{command}/change/").content.decode()
    assert "rollout command created" in page and f"rollout #{rollout.pk} wave 1" in page
