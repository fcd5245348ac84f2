"""``manage.py demo_admin`` (``make admin``): the Django admin on the data ``make demo`` left,
for a staff user who administers the demo organisation only, so the scoped admin shows its
farm, devices, commands, rules and rollouts. The password is printed once, when the login is
made or ``--reset``; then the development server serves this same database on loopback."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.urls import reverse

from config.tables import format_table
from devices.models import Farm
from devtools.demo import DEMO_FARM
from devtools.provisioning import ORGANIZATION, demo_login_ensure

ADMIN_LOGIN = "demo-admin"
NO_DEMO = "this database has no demo data: run make demo first"
RESET_HINT = "`make admin ADMIN_ARGS=--reset` prints a new one"


def demo_farm() -> Farm | None:
    """The demo's farm, else another farm of the demo organisation (``make up`` makes them);
    None when there is none, or no tables yet."""
    try:
        farms = Farm.objects.select_related("organization").filter(organization__name=ORGANIZATION)
        return farms.filter(name=DEMO_FARM).first() or farms.order_by("pk").first()
    except DatabaseError:  # never migrated: the demo has not run here
        return None


class Command(BaseCommand):
    help = "Serve the admin on the demo's data with a staff login (its password printed once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="on 127.0.0.1")
        parser.add_argument(
            "--reset", action="store_true", help="give the login a new password (printed)"
        )
        parser.add_argument(
            "--no-serve", action="store_true", help="make the login and print it; serve nothing"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        farm = demo_farm()
        if farm is None:
            raise CommandError(NO_DEMO)
        login = demo_login_ensure(
            organization=farm.organization, username=ADMIN_LOGIN, reset=opts["reset"]
        )
        base = f"http://127.0.0.1:{opts['port']}"
        self.stdout.write(
            f"The demo's data in the admin, for {ADMIN_LOGIN} "
            f"(staff, admin of {farm.organization.name} only):"
        )
        self.stdout.write(format_table(["what", "URL"], _pages(base, farm)))
        if login.password is None:
            self.stdout.write(
                f"login {ADMIN_LOGIN}: its password was printed when it was made ({RESET_HINT})"
            )
        else:
            self.stdout.write(
                f"login {ADMIN_LOGIN} / {login.password}   (shown this once; {RESET_HINT})"
            )
        if not opts["no_serve"]:
            # No autoreloader: its child process would run this command, and a reset, again.
            # Static files from the apps themselves (insecure_serving, as DEBUG is off): the
            # admin is styled on a fresh copy, before any collectstatic.
            call_command(
                "runserver",
                f"127.0.0.1:{opts['port']}",
                use_reloader=False,
                insecure_serving=True,
            )


def _pages(base: str, farm: Farm) -> list[list[str]]:
    """The admin's pages on the demo's rows."""
    lists = [
        ("devices", "admin:devices_device_changelist"),
        ("commands", "admin:automation_devicecommand_changelist"),
        ("rules", "admin:automation_automationrule_changelist"),
        ("rollouts", "admin:rollouts_rollout_changelist"),
    ]
    return [
        ["admin", base + reverse("admin:index")],
        [f"farm {farm.name}", base + reverse("admin:devices_farm_change", args=[farm.pk])],
        *([what, base + reverse(name)] for what, name in lists),
    ]
