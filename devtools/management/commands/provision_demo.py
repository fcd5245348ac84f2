"""``manage.py provision_demo``: an organisation, an operator (superuser with an API token),
farms, the simulator's devices and their rules, then where to look. ``make up`` runs it with
``--if-empty`` so a database that already has farms is left as it is."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.tables import format_table
from devices.models import Farm
from devtools.provisioning import OPERATOR, provision_demo, simulator_serials


class Command(BaseCommand):
    help = "Create a demo organisation, operator login and token, farms, devices and rules."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--farms", type=int, default=1, help="farms to deal devices to")
        parser.add_argument("--devices", type=int, default=10, help="as device_simulator's")
        parser.add_argument("--prefix", default="SIM", help="as device_simulator's")
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing when any farm exists"
        )
        parser.add_argument("--web-url", default="", help="print the URLs under this base")
        parser.add_argument("--flower-url", default="")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["farms"] < 1 or opts["devices"] < 1:
            raise CommandError("--farms and --devices must be >= 1")
        if opts["if_empty"] and Farm.objects.exists():
            self.stdout.write("provision_demo: the database already has farms; left as it is")
        else:
            done = provision_demo(
                farms=opts["farms"], serials=simulator_serials(opts["prefix"], opts["devices"])
            )
            self.stdout.write(
                f"provision_demo: {done.farms} farms, {done.devices} devices, "
                f"{done.rules} rules created"
            )
            if done.password:
                self.stdout.write(
                    f"login {OPERATOR} / {done.password}   API token {done.token}\n"
                    "(shown once: `manage.py changepassword operator` and "
                    "`manage.py api_token operator` make new ones)"
                )
        if opts["web_url"]:
            self.stdout.write(self._urls(opts["web_url"].rstrip("/"), opts["flower_url"]))

    @staticmethod
    def _urls(web: str, flower: str) -> str:
        rows = [
            ["admin", f"{web}/admin/", f"user {OPERATOR}"],
            ["API root", f"{web}/api/v1/", "Authorization: Token <key>"],
            ["API docs", f"{web}/api/docs/", "Swagger UI; Redoc at /api/redoc/"],
            ["metrics", f"{web}/metrics", "Prometheus text, loopback"],
            ["health", f"{web}/health", ""],
        ]
        if flower:
            rows.append(["Flower", flower, "Celery workers and tasks"])
        return format_table(["what", "URL", "note"], rows)
