"""A file storage that records every call, to show which paths touch trace blobs at all."""

from __future__ import annotations

from typing import Any

from django.core.files.storage import FileSystemStorage

CALLS: list[tuple[str, str]] = []


class RecordingStorage(FileSystemStorage):
    def _save(self, name: str, content: Any) -> str:
        CALLS.append(("save", name))
        return super()._save(name, content)

    def _open(self, name: str, mode: str = "rb") -> Any:
        CALLS.append(("open", name))
        return super()._open(name, mode)

    def exists(self, name: str) -> bool:
        CALLS.append(("exists", name))
        return super().exists(name)

    def delete(self, name: str) -> None:
        CALLS.append(("delete", name))
        super().delete(name)

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        CALLS.append(("listdir", path))
        return super().listdir(path)
