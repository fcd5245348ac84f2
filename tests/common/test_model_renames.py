"""The upgrade that renames the command, due-work and trace models (``DeviceCommand``,
``DueWork``, ``DueWorkTransition``, ``TraceRecord``), on a database of the previous release:
no table is rewritten or renamed, no foreign key is dropped and re-validated, every row
reads through the new models, and a user's grant, the staff groups and the admin's history
follow the rename."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from automation.models import CommandTransition, DeviceCommand
from automation.services.manual import endpoint_command_manual
from common.models import MemberRole
from scheduler.models import DueWork, DueWorkTransition, TraceRecord
from tests.devices.factories import make_farm
from tests.migrating import migrate_to, schema_catalog
from tests.scheduler.factories import DueWorkFactory

PREVIOUS = [
    ("automation", "0013_events_partitioned"),
    ("scheduler", "0005_scheduler_key_one_pattern_ops_index"),
]
# (app, model name before, model name now, the model)
RENAMES: list[tuple[str, str, str, Any]] = [
    ("automation", "automationcommandintent", "devicecommand", DeviceCommand),
    ("scheduler", "automationscheduler", "duework", DueWork),
    ("scheduler", "automationschedulertransition", "dueworktransition", DueWorkTransition),
    ("scheduler", "automationjob", "tracerecord", TraceRecord),
]
TABLES = [model._meta.db_table for *_, model in RENAMES]


def _migrate(targets: list[tuple[str, str]] | None = None) -> None:
    migrate_to(targets)


def _seed() -> tuple[int, int, int]:
    kit = make_farm()
    user = User.objects.create_user("support", is_staff=True)
    made = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=True, actor=user, reason="vent check"
    )
    row = DueWorkFactory(farm=kit.farm)
    DueWorkTransition.objects.create(
        scheduler=row, from_status="", to_status="pending", version=0, at=timezone.now()
    )
    now = timezone.now()
    TraceRecord.objects.create(
        scheduler_id=row.pk,
        automation_type=row.automation_type,
        scheduler_key=row.scheduler_key,
        token=1,
        attempt=1,
        outcome="completed",
        started_at=now,
        finished_at=now,
        duration_ms=1,
        worker="w",
    )
    return user.pk, made.command.pk, row.pk


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_renamed_models_keep_their_tables_keys_rows_and_grants() -> None:
    user_id, command_id, row_id = _seed()
    _migrate(PREVIOUS)
    types_before = {
        (app, old): ContentType.objects.get(app_label=app, model=old).pk
        for app, old, _new, _model in RENAMES
    }
    user = User.objects.get(pk=user_id)
    user.user_permissions.add(Permission.objects.get(codename="view_automationcommandintent"))
    # The staff group as the previous release left it (an earlier transactional test may have
    # flushed the one the migrations made).
    viewers, _ = Group.objects.get_or_create(name=MemberRole.VIEWER)
    viewers.permissions.add(Permission.objects.get(codename="view_automationscheduler"))
    LogEntry.objects.create(
        user=user,
        content_type_id=types_before[("automation", "automationcommandintent")],
        object_id=str(command_id),
        object_repr="command",
        action_flag=CHANGE,
    )
    catalog = schema_catalog(TABLES)
    assert len(catalog["nodes"]) == len(TABLES) and catalog["keys"]

    _migrate()

    after = schema_catalog(TABLES)
    # No table rewritten, no key dropped and made again (an app that came after the previous
    # release, such as rollouts, adds keys of its own when it is migrated again).
    assert after["nodes"] == catalog["nodes"]
    assert {name: after["keys"].get(name) for name in catalog["keys"]} == catalog["keys"]
    assert DeviceCommand.objects.get(pk=command_id).request_reason == "vent check"
    assert CommandTransition.objects.filter(command_id=command_id).exists()
    assert DueWork.objects.get(pk=row_id).transitions.count() == 1
    assert TraceRecord.objects.filter(scheduler_id=row_id).count() == 1
    for app, old, new, _model in RENAMES:
        assert ContentType.objects.get(app_label=app, model=new).pk == types_before[(app, old)]
        assert not ContentType.objects.filter(app_label=app, model=old).exists()
        assert not Permission.objects.filter(codename__endswith=f"_{old}").exists()
    user = User.objects.get(pk=user_id)  # a fresh instance: permissions are cached
    assert user.has_perm("automation.view_devicecommand")
    viewers = Group.objects.get(name=MemberRole.VIEWER).permissions
    assert viewers.filter(codename="view_duework").exists()
    assert not viewers.filter(codename="change_duework").exists()
    entry = LogEntry.objects.get(object_id=str(command_id))
    assert entry.get_edited_object().pk == command_id


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "/admin/automation/automationcommandintent/7/change/?x=1",
            "/admin/automation/devicecommand/7/change/?x=1",
        ),
        ("/admin/scheduler/automationscheduler/", "/admin/scheduler/duework/"),
        (
            "/admin/scheduler/automationjob/?outcome=failed",
            "/admin/scheduler/tracerecord/?outcome=failed",
        ),
    ],
)
def test_a_renamed_models_previous_admin_address_leads_to_its_page(
    client: Any, old: str, new: str
) -> None:
    response = client.get(old)
    assert response.status_code == 302 and response["Location"] == new
