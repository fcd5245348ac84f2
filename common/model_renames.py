"""A model renamed in code keeps its table, its admin history and its permissions: the state
is renamed without touching the database (``SeparateDatabaseAndState``), and the content type
and its permissions are renamed in place, so log entries, staff groups and a user's direct
grants still point at the model. Django injects the content type rename only for a top-level
``RenameModel``, which would also drop and re-validate every foreign key to the table."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def model_rename(app_label: str, old_name: str, new_name: str, *, table: str) -> list[Any]:
    """The operations that rename ``old_name`` to ``new_name`` in ``app_label`` and pin its
    table to ``table`` (what it was called before), with no statement on the table itself."""
    old, new = old_name.lower(), new_name.lower()

    def forwards(apps: Any, schema_editor: Any) -> None:
        _content_type_rename(apps, schema_editor, app_label, old, new, new_name)

    def backwards(apps: Any, schema_editor: Any) -> None:
        _content_type_rename(apps, schema_editor, app_label, new, old, old_name)

    return [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterModelTable(name=old, table=table),
                migrations.RenameModel(old_name=old_name, new_name=new_name),
            ]
        ),
        migrations.RunPython(forwards, backwards),
    ]


def _content_type_rename(
    apps: Any, schema_editor: Any, app_label: str, old: str, new: str, new_name: str
) -> None:
    content_types = apps.get_model("contenttypes", "ContentType")
    permissions = apps.get_model("auth", "Permission")
    db = schema_editor.connection.alias
    found = content_types.objects.using(db).filter(app_label=app_label, model=old).first()
    if (
        found is None
        or content_types.objects.using(db).filter(app_label=app_label, model=new).exists()
    ):
        return  # a fresh database, or the new name already has its own rows
    found.model = new
    found.save(update_fields=["model"])
    content_types.objects.clear_cache()
    words = " ".join(_words(new_name))
    for permission in permissions.objects.using(db).filter(content_type=found):
        verb, _, rest = permission.codename.partition("_")
        if rest != old:
            continue  # a custom permission keeps its name
        permission.codename = f"{verb}_{new}"
        permission.name = f"Can {verb} {words}"
        permission.save(update_fields=["codename", "name"])


def _words(class_name: str) -> list[str]:
    """``DeviceCommand`` → ["device", "command"], as Django derives a verbose name."""
    out: list[str] = []
    for char in class_name:
        if char.isupper() and out:
            out.append(" ")
        out.append(char.lower())
    return "".join(out).split()
