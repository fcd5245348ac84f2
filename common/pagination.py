"""Pages of the API's lists. Append-heavy resources (commands, executions, notifications,
due work) page by an opaque cursor over their id: a page is one index range scan whatever the
table's size, where page numbers need a ``COUNT(*)`` and an ``OFFSET`` that read every row
before the page. Small resources keep page numbers (the default pagination class)."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirstCursor(CursorPagination):
    """Newest first by id; ``?page_size=`` up to ``max_page_size``."""

    ordering = "-pk"
    page_size_query_param = "page_size"
    max_page_size = 200
