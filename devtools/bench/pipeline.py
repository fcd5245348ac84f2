"""The whole pipeline in this process, assembled as tests/e2e assembles it: an in-process
Celery worker and beat on a private key space of the configured broker, coordination keys
under a prefix of their own, and an MQTT bridge in a shared-subscription group of its own
whose session is forgotten afterwards. What stays shared is the broker's topic space: the
bench's bridge also receives the devices of other runs on the same broker (and records them
as unknown: those rows are deleted afterwards), and their bridges receive the bench's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from django.conf import settings

from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.client import forget_session
from devtools.bench import BenchError
from devtools.runtime import (
    in_process_beat,
    in_process_worker,
    private_cache_keys,
    private_task_queues,
)

WORKER_THREADS = 4  # as the end-to-end tests run it
BEAT_TICK_S = 0.1
CONNECT_TIMEOUT_S = 15.0
BRIDGE_SESSION_EXPIRY_S = 300


def bench_mqtt_config(run: str) -> MqttConfig:
    """The configured broker, with a shared-subscription group of the run's own where the
    broker has them: a deployment's bridge (or a session an earlier run left) in the
    configured group would otherwise take a share of the bench's messages."""
    configured: MqttConfig = settings.MQTT
    if configured.shared_group is None:
        return configured
    return replace(configured, shared_group=f"bench-{run}")


@contextmanager
def pipeline_running(*, run: str, config: MqttConfig) -> Iterator[MqttBridge]:
    """Worker, beat and bridge up and subscribed; everything stopped on the way out, the
    worker only once its running tasks finished (nothing writes after the block)."""
    client_id = f"bench-bridge-{run}"
    with (
        private_task_queues(f"bench-{run}"),
        private_cache_keys(f"bench-{run}"),
        in_process_worker(concurrency=WORKER_THREADS),
        in_process_beat(tick_s=BEAT_TICK_S),
    ):
        # Its own shared group also hands it other traffic on the broker: what it records
        # about devices this database does not know stays recorded (nothing is deleted that
        # the bench did not create).
        bridge = MqttBridge(
            config=config, client_id=client_id, session_expiry_s=BRIDGE_SESSION_EXPIRY_S
        )
        bridge.start()
        try:
            if not bridge.wait_connected(CONNECT_TIMEOUT_S):
                raise BenchError(f"the bridge did not connect to {config.host}:{config.port}")
            yield bridge
        finally:
            bridge.stop()
            forget_session(config, client_id)
