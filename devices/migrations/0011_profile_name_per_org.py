"""A profile's name is unique in its organisation, and among the global profiles."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("devices", "0010_device_profile_organization"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="deviceprofile",
            constraint=models.UniqueConstraint(
                fields=("organization", "name"), name="profile_name_per_org"
            ),
        ),
        migrations.AddConstraint(
            model_name="deviceprofile",
            constraint=models.UniqueConstraint(
                condition=models.Q(("organization__isnull", True)),
                fields=("name",),
                name="global_profile_name_once",
            ),
        ),
    ]
