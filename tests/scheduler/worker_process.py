"""A scheduler worker run by tests as a separate process (Django set up here, pointed at the
test database through DATABASE_URL). Its handler's effect is one row per execution in a raw
table the test created, so the test counts what really ran, per key.

Modes:
  drain TABLE GO_FILE   print "ready", wait for GO_FILE, claim+execute until nothing is due,
                        print the outcome counts as JSON
  kill TABLE            claim one row, write the effect, print the token, SIGKILL ourselves
  stall TABLE           claim one row, write the effect, print the token, SIGSTOP ourselves;
                        once continued, try to complete and print the outcome
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")


def main(mode: str, table: str, go_file: str | None) -> None:
    import django

    django.setup()
    from django.db import connection
    from django.utils import timezone

    from scheduler.models import AutomationType
    from scheduler.registry import (
        HandlerResult,
        SchedulerJob,
        scheduler_handler_register,
    )
    from scheduler.services import (
        scheduler_claim_due,
        scheduler_execute,
        scheduler_process_due,
    )

    class EffectHandler:
        def revalidate(self, job: SchedulerJob) -> None:
            return None

        def run(self, job: SchedulerJob) -> HandlerResult:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {table} (scheduler_key, token, pid) VALUES (%s, %s, %s)",
                    [job.scheduler_key, job.token, os.getpid()],
                )
            if mode in {"kill", "stall"}:
                print(json.dumps({"id": job.scheduler_id, "token": job.token}), flush=True)
                os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
            return HandlerResult(coordinates={"pid": os.getpid()})

    scheduler_handler_register(AutomationType.REPORT_SUBSCRIPTION, EffectHandler(), replace=True)
    if mode == "drain":
        assert go_file is not None
        print("ready", flush=True)
        while not Path(go_file).exists():
            time.sleep(0.005)
        outcomes = scheduler_process_due(batch=int(os.environ.get("SCHEDULER_CLAIM_BATCH", 50)))
        print(json.dumps(dict(outcomes)), flush=True)
        return
    (claim,) = scheduler_claim_due(now=timezone.now(), limit=1)
    outcome = scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token)
    print(json.dumps({"outcome": str(outcome)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
