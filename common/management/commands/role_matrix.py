"""``manage.py role_matrix``: who may call each route of the API, as a Markdown table (the
docs/security.md prints it; a test checks the two agree)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from common.role_matrix import matrix_markdown


class Command(BaseCommand):
    help = "Print the API's role matrix: every route and method with the role it needs."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(matrix_markdown(), ending="")
