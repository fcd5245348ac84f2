"""Racing real transactions: ``race`` starts ``work`` in several threads at one barrier, each
with its own database connection (closed after), and returns what they raised."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def race(work: Callable[[], object], threads: int, *, join_s: float = 60) -> list[BaseException]:
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            work()
        except BaseException as exc:  # collected and asserted by the test
            errors.append(exc)
        finally:
            connection.close()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join(join_s)
    return errors
