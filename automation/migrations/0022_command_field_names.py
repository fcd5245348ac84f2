"""The ledger's foreign keys and reverse names say "command", as the model does since it was
renamed (0014): ``intent`` becomes ``command`` on the transitions, receipts and manual holds,
each pinned to its column ``intent_id``, and the reverse names ``intents`` and
``inflight_intent`` become ``commands`` and ``inflight_command``; the outcome stored as
``intent_created`` reads "Command created". Django's state only: no table, column, index or
key is touched, and no stored value changes (docs/architecture.md, "Names kept from before
the rename")."""

import django.db.models.deletion
from django.db import migrations, models

# (model, nullable, reverse name) of every foreign key that was called ``intent``.
_COMMAND_KEYS = (
    ("commandtransition", False, "transitions"),
    ("devicecommandreceipt", True, "receipts"),
    ("endpointmanualhold", False, "+"),
)


def _command_key_renames() -> list[migrations.operations.base.Operation]:
    operations: list[migrations.operations.base.Operation] = []
    for model, nullable, related_name in _COMMAND_KEYS:
        operations += [
            migrations.RenameField(model_name=model, old_name="intent", new_name="command"),
            migrations.AlterField(
                model_name=model,
                name="command",
                field=models.ForeignKey(
                    blank=nullable,
                    null=nullable,
                    db_column="intent_id",
                    on_delete=django.db.models.deletion.CASCADE,
                    related_name=related_name,
                    to="automation.devicecommand",
                ),
            ),
        ]
    return operations


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0021_lean_endpoint_events"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                *_command_key_renames(),
                migrations.AlterField(
                    model_name="devicecommand",
                    name="rule_execution",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="commands",
                        to="automation.automationruleexecution",
                    ),
                ),
                migrations.AlterField(
                    model_name="devicecommand",
                    name="rule",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="commands",
                        to="automation.automationrule",
                    ),
                ),
                migrations.AlterField(
                    model_name="devicecommand",
                    name="target_device",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="commands",
                        to="devices.device",
                    ),
                ),
                migrations.AlterField(
                    model_name="devicecommand",
                    name="target_device_endpoint",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="commands",
                        to="devices.deviceinstanceendpoint",
                    ),
                ),
                migrations.AlterField(
                    model_name="automationruleexecution",
                    name="outcome",
                    field=models.CharField(
                        choices=[
                            ("intent_created", "Command created"),
                            ("already_in_state", "Already In State"),
                            ("already_pending", "Already Pending"),
                            ("blocked", "Blocked"),
                            ("suppressed", "Suppressed"),
                            ("discarded", "Discarded"),
                            ("skipped", "Skipped"),
                        ],
                        max_length=32,
                    ),
                ),
                migrations.AlterField(
                    model_name="devicecommand",
                    name="inflight_endpoint",
                    field=models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="inflight_command",
                        to="devices.deviceinstanceendpoint",
                    ),
                ),
            ]
        )
    ]
