"""Device profiles belong to an organisation. Each existing profile goes to the organisation
of the devices that use it (their profile, or instance endpoints left on its catalogue by an
earlier move); one used by several organisations stays with the lowest organisation id and
is copied, with its catalogue, for each further one, whose devices and instance endpoints are
re-pointed to the copy. Rules, events and commands point at instance endpoints, whose ids do
not change. A profile no device uses stays global (no organisation).

The unique constraints come in the next migration: on PostgreSQL a table with rows written
in this transaction cannot be altered before it commits."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

# Catalogue columns a copy repeats (everything but the id and the profile).
ENDPOINT_FIELDS = (
    "key",
    "data_type",
    "writable",
    "min_value",
    "max_value",
    "allowed_values",
    "rpc_method",
    "rpc_param_key",
)


def _organisations_using(apps: Any, profile_id: int) -> list[int]:
    Device = apps.get_model("devices", "Device")
    Instance = apps.get_model("devices", "DeviceInstanceEndpoint")
    by_profile = Device.objects.filter(profile_id=profile_id).values_list(
        "farm__organization_id", flat=True
    )
    by_endpoint = Instance.objects.filter(profile_endpoint__profile_id=profile_id).values_list(
        "device__farm__organization_id", flat=True
    )
    return sorted({*by_profile, *by_endpoint})


def _copy_for(apps: Any, profile: Any, organization_id: int) -> None:
    """The profile and its catalogue copied for ``organization_id``; that organisation's
    devices and their instance endpoints moved from the original to the copy."""
    Profile = apps.get_model("devices", "DeviceProfile")
    Endpoint = apps.get_model("devices", "DeviceProfileEndpoint")
    Device = apps.get_model("devices", "Device")
    Instance = apps.get_model("devices", "DeviceInstanceEndpoint")
    copy = Profile.objects.create(name=profile.name, organization_id=organization_id)
    devices = Device.objects.filter(farm__organization_id=organization_id)
    for endpoint in Endpoint.objects.filter(profile_id=profile.pk).order_by("pk"):
        fields = {name: getattr(endpoint, name) for name in ENDPOINT_FIELDS}
        copied = Endpoint.objects.create(profile_id=copy.pk, **fields)
        Instance.objects.filter(
            device_id__in=devices.values("pk"), profile_endpoint_id=endpoint.pk
        ).update(profile_endpoint_id=copied.pk)
    devices.filter(profile_id=profile.pk).update(profile_id=copy.pk)


def profiles_to_their_organisations(apps: Any, schema_editor: Any) -> None:
    Profile = apps.get_model("devices", "DeviceProfile")
    for profile in list(Profile.objects.order_by("pk")):
        organisations = _organisations_using(apps, profile.pk)
        if not organisations:
            continue  # no device uses it: a global profile
        first, *others = organisations
        Profile.objects.filter(pk=profile.pk).update(organization_id=first)
        for organization_id in others:
            _copy_for(apps, profile, organization_id)


def names_unique_again(apps: Any, schema_editor: Any) -> None:
    """Backwards, names are unique across all profiles again: every profile but the oldest
    of a name is renamed with its id (copies stay copies; no device moves back)."""
    Profile = apps.get_model("devices", "DeviceProfile")
    seen: set[str] = set()
    for profile in Profile.objects.order_by("pk"):
        if profile.name in seen:
            Profile.objects.filter(pk=profile.pk).update(name=f"{profile.name[:180]} [{profile.pk}]")
        seen.add(profile.name)


class Migration(migrations.Migration):
    dependencies = [
        ("common", "0003_member_role"),
        ("devices", "0009_farm_manual_override_minutes"),
    ]

    operations = [
        migrations.AddField(
            model_name="deviceprofile",
            name="organization",
            field=models.ForeignKey(
                blank=True,
                help_text="empty: a global profile, offered to every organisation",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="device_profiles",
                to="common.organization",
            ),
        ),
        migrations.AlterField(
            model_name="deviceprofile",
            name="name",
            field=models.CharField(max_length=200),
        ),
        migrations.RunPython(profiles_to_their_organisations, names_unique_again),
    ]
