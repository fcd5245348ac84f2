"""Run by a test as a separate process: dispatch one intent and SIGKILL ourselves right
after the broker acknowledged the publish, before the intent is marked ``dispatched``."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
CONNECT_TIMEOUT_S = 30.0


def main(intent_id: int) -> None:
    import django

    django.setup()
    from automation.services.dispatch import command_dispatch
    from devices.mqtt.publisher import Publisher

    publisher = Publisher()
    publisher.start(timeout_s=CONNECT_TIMEOUT_S)  # a loaded machine connects slowly
    if not publisher.wait_connected(CONNECT_TIMEOUT_S):
        print("not connected to the broker", file=sys.stderr)
        return

    def publish_then_die(topic: str, payload: bytes) -> int:
        publisher.publish(topic, payload, timeout_s=CONNECT_TIMEOUT_S)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    outcome = command_dispatch(command_id=intent_id, publish=publish_then_die)
    print(f"not published: {outcome}", file=sys.stderr)  # the test shows why


if __name__ == "__main__":
    main(int(sys.argv[1]))
