"""The upgrade that renames the ledger's ``intent`` foreign keys to ``command`` (and the
reverse names ``intents``/``inflight_intent``), on a database of the previous release: it
changes Django's state only. No table is rewritten, no foreign key is dropped and made again,
the columns keep their names (``intent_id``), and the rows written before read through the
new names."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from automation.models import (
    CommandTransition,
    DeviceCommand,
    DeviceCommandReceipt,
    EndpointManualHold,
)
from automation.services.manual import endpoint_command_manual
from tests.devices.factories import make_farm
from tests.migrating import migrate_to, schema_catalog

PREVIOUS = [("automation", "0021_lean_endpoint_events")]
RENAMED = [CommandTransition, DeviceCommandReceipt, EndpointManualHold]
TABLES = [model._meta.db_table for model in (*RENAMED, DeviceCommand)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_renamed_fields_keep_their_columns_keys_and_rows() -> None:
    kit = make_farm()
    user = User.objects.create_user("operator", is_staff=True)
    made = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=True, actor=user, reason="vent check"
    )
    command_id = made.command.pk
    migrate_to(PREVIOUS)
    before = schema_catalog(TABLES)
    assert len(before["nodes"]) == len(TABLES) and before["keys"]

    migrate_to()

    after = schema_catalog(TABLES)
    assert after["nodes"] == before["nodes"]
    assert {name: after["keys"].get(name) for name in before["keys"]} == before["keys"]
    assert after["columns"] == before["columns"]
    assert {getattr(model._meta.get_field("command"), "column", "") for model in RENAMED} == {
        "intent_id"
    }
    assert CommandTransition.objects.filter(command_id=command_id).exists()
    hold = EndpointManualHold.objects.get(endpoint=kit.io1)
    assert hold.command == DeviceCommand.objects.get(pk=command_id)
    assert kit.io1.commands.get() == hold.command
