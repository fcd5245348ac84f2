"""``manage.py demo_admin`` (``make admin``): after ``make demo`` a newcomer logs in to the
admin with the login it prints and lands on the demo farm's rows, and only those: the login
is a staff user who administers the demo organisation alone. Its password is printed once;
without the demo's data the command says so in one line and fails. Nothing here starts the
development server (``--no-serve``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from common.models import MemberRole, OrganizationMember
from devices.models import Farm
from devtools.demo import DEMO_FARM, seed_demo_farm
from devtools.management.commands.demo_admin import ADMIN_LOGIN, NO_DEMO
from devtools.provisioning import ORGANIZATION
from rollouts.services.plan import RolloutSpec, rollout_create
from tests.automation.conftest import make_intent
from tests.devices.factories import FarmFactory, make_farm

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("clock_at_fixture_dates", "staff_groups"),
]
ROOT = Path(__file__).resolve().parents[2]
PASSWORD = re.compile(rf"^login {ADMIN_LOGIN} / (\S+)", re.MULTILINE)
PAGE = re.compile(r"^(\S+(?: \S+)*)\s+http://127\.0\.0\.1:8000(/\S*)$", re.MULTILINE)


def _run(*args: str) -> str:
    out = StringIO()
    call_command("demo_admin", "--no-serve", *args, stdout=out)
    return out.getvalue()


def _password(text: str) -> str:
    found = PASSWORD.search(text)
    assert found, text
    return found[1]


@pytest.fixture
def demo_rows(clock_at_fixture_dates: None) -> None:
    """What ``make demo`` leaves, in small: the demo farm's devices and rules, a command and a
    rollout on it; and another organisation's farm beside it."""
    seed_demo_farm(2)
    kit = make_farm(farm=Farm.objects.get(name=DEMO_FARM), prefix="DEMO-K")
    kit.rule(name="Kit vent")
    make_intent(kit)
    user = User.objects.create_user(username="demo-operator")
    spec = RolloutSpec(
        name="Relays off for the season",
        farm_ids=[kit.farm.pk],
        profile_id=kit.actuator.profile_id,
        endpoint_key="io1",
        value=False,
        reason="season end",
        canary_size=1,
    )
    rollout_create(organization=kit.farm.organization, actor=user, spec=spec)
    elsewhere = make_farm(farm=FarmFactory(name="Elsewhere farm"), prefix="ELSE")
    elsewhere.rule(name="Elsewhere vent")


@pytest.mark.usefixtures("demo_rows")
def test_the_login_is_staff_scoped_to_the_demo_organisation_and_shown_once() -> None:
    first = _password(_run())
    user = User.objects.get(username=ADMIN_LOGIN)
    assert user.is_staff and user.is_active and not user.is_superuser
    assert list(user.groups.values_list("name", flat=True)) == [MemberRole.ADMIN]
    memberships = OrganizationMember.objects.filter(user=user)
    assert list(memberships.values_list("organization__name", "role")) == [
        (ORGANIZATION, MemberRole.ADMIN)
    ]

    again = _run()
    assert not PASSWORD.search(again) and first not in again
    assert "its password was printed when it was made" in again
    assert User.objects.get(username=ADMIN_LOGIN).check_password(first)

    reset = _password(_run("--reset"))
    user.refresh_from_db()
    assert reset != first and user.check_password(reset) and not user.check_password(first)
    assert OrganizationMember.objects.filter(user=user).count() == 1


@pytest.mark.usefixtures("demo_rows")
def test_the_printed_login_lands_on_the_demo_farms_rows_and_no_others() -> None:
    text = _run()
    pages = dict(PAGE.findall(text))
    assert set(pages) == {"admin", f"farm {DEMO_FARM}", "devices", "commands", "rules", "rollouts"}
    client = Client()
    assert client.login(username=ADMIN_LOGIN, password=_password(text))

    seen = {}
    for what, path in pages.items():
        response = client.get(path)
        assert response.status_code == 200, (what, path, response.status_code)
        seen[what] = response.content.decode()
    assert DEMO_FARM in seen[f"farm {DEMO_FARM}"]
    assert "DEMO-S01" in seen["devices"] and "DEMO-K-relay" in seen["devices"]
    assert "Vent on 1" in seen["rules"] and "Kit vent" in seen["rules"]
    assert "DEMO-K-relay" in seen["commands"]
    assert "Relays off for the season" in seen["rollouts"]
    farms = client.get("/admin/devices/farm/").content.decode()
    assert DEMO_FARM in farms and "Elsewhere farm" not in farms
    assert "ELSE-relay" not in seen["devices"] and "Elsewhere vent" not in seen["rules"]


def test_without_the_demo_data_it_says_run_make_demo_first() -> None:
    with pytest.raises(CommandError) as refused:
        _run()
    assert str(refused.value) == NO_DEMO and "\n" not in NO_DEMO
    assert not User.objects.filter(username=ADMIN_LOGIN).exists()


def test_on_a_database_never_migrated_it_fails_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
    done = subprocess.run(
        [sys.executable, "manage.py", "demo_admin"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"CommandError: {NO_DEMO}"], done.stderr
    assert done.stdout == ""
