"""`manage.py mqtt_bridge`: the MQTT bridge as a process of its own (docs/spec.md §1). The
command owns only the process concerns: signals for a clean stop, progress lines, exit on a fatal
refusal or when another client keeps taking its session over. What happens to each message
lives in MqttBridge."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from config.env import BACKEND_CLIENT_ID_MARK, MqttConfig
from devices.mqtt.bridge import MqttBridge, SessionTakenOver
from devices.mqtt.client import MqttUnavailable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Exit status after SessionTakenOver: a configuration error (EX_CONFIG), which the systemd
# unit does not restart (RestartPreventExitStatus), since a restart resumes the fight.
EXIT_SESSION_TAKEN_OVER = 78
RETIRE_QUIET_S = 3.0  # --retire: nothing received for this long means the session is drained


class Command(BaseCommand):
    help = (
        "Run the MQTT bridge: subscribe to device telemetry, RPC responses and state reports, "
        "hand them to Celery in batches and acknowledge MQTT only after each hand-off. "
        "SIGTERM or Ctrl-C stops it cleanly, keeping the broker session."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--client-id",
            default=None,
            help="MQTT client id (default BRIDGE_CLIENT_ID or farm-bridge/<hostname>); keep "
            f"it stable across restarts; it must contain {BACKEND_CLIENT_ID_MARK!r}, which no "
            "device's client id does",
        )
        parser.add_argument(
            "--retire",
            action="store_true",
            help="hand off what the session of --client-id holds, then end that session and "
            "exit: a bridge that is gone for good (or an old client id) then takes no more "
            "share of the shared subscription",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="messages per Celery task (default BRIDGE_BATCH_SIZE)",
        )
        parser.add_argument(
            "--flush-ms",
            type=float,
            default=None,
            help="flush a batch this long after its first message (default BRIDGE_FLUSH_MS)",
        )
        parser.add_argument(
            "--progress-interval",
            type=float,
            default=5.0,
            help="seconds between progress lines; 0 disables them",
        )
        parser.add_argument(
            "--duration", type=float, default=0.0, help="seconds to run; 0 runs until signalled"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["batch_size"] is not None and opts["batch_size"] < 1:
            raise CommandError("--batch-size must be >= 1")
        if opts["flush_ms"] is not None and opts["flush_ms"] < 0:
            raise CommandError("--flush-ms must be >= 0")
        _check_client_id(opts["client_id"], retire=opts["retire"])
        if settings.CELERY_BROKER_EMBEDDED:
            raise CommandError(
                "CELERY_BROKER_URL is unset, so Celery uses the in-process memory transport: a "
                "bridge process of its own would acknowledge messages that no worker can "
                "ever read. Set CELERY_BROKER_URL (redis://...), or run the bridge inside "
                "the embedded demo."
            )
        config: MqttConfig = settings.MQTT
        if config.embedded:
            _embedded_broker_start(config)
        bridge = MqttBridge(
            config=config,
            client_id=opts["client_id"],
            batch_size=opts["batch_size"],
            flush_ms=opts["flush_ms"],
            heartbeat=_heartbeat,
            retire=opts["retire"],
        )
        stop = threading.Event()
        previous = self._install_signal_handlers(stop)
        if opts["duration"] > 0:
            timer = threading.Timer(opts["duration"], stop.set)
            timer.daemon = True
            timer.start()
        if opts["retire"]:
            threading.Thread(target=_stop_when_drained, args=(bridge, stop), daemon=True).start()
        progress = threading.Thread(
            target=self._progress, args=(bridge, stop, opts["progress_interval"]), daemon=True
        )
        self.stdout.write(
            f"MQTT bridge {bridge.client_id} on {config.host}:{config.port} "
            f"(MQTT {'5' if config.protocol == 5 else '3.1.1'}, "
            f"{'shared group ' + config.shared_group if config.shared_group else 'no shared group'}"
            f"); SIGTERM or Ctrl-C stops"
        )
        progress.start()
        try:
            bridge.run_forever(stop)
        except MqttUnavailable as exc:
            raise CommandError(f"MQTT broker refused the bridge: {exc}") from exc
        except SessionTakenOver as exc:
            raise CommandError(str(exc), returncode=EXIT_SESSION_TAKEN_OVER) from exc
        finally:
            stop.set()
            progress.join(timeout=1)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        self.stdout.write(f"stopped: {bridge.stats.summary()}")

    @staticmethod
    def _install_signal_handlers(stop: threading.Event) -> dict[int, Any]:
        """The first signal only sets ``stop``: the loop then flushes, acknowledges and
        disconnects instead of dying mid-batch; a second one exits at once (what is not
        acknowledged is redelivered). Signals can only be handled on the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            if stop.is_set():  # a second signal: the operator does not want to wait
                raise SystemExit(128 + signum)
            stop.set()

        return {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}

    def _progress(self, bridge: MqttBridge, stop: threading.Event, interval_s: float) -> None:
        if interval_s <= 0:
            return
        started = time.monotonic()
        while not stop.wait(interval_s):
            self.stdout.write(
                f"t={time.monotonic() - started:7.1f}s "
                f"{'connected' if bridge.wait_connected(0) else 'DISCONNECTED'} "
                f"{bridge.stats.summary()}"
            )


def _check_client_id(client_id: str | None, *, retire: bool) -> None:
    """An id no device can take (``BACKEND_CLIENT_ID_MARK``); ``--retire`` may name an old one."""
    if retire and not client_id:
        raise CommandError("--retire needs --client-id: the id whose session to end")
    if client_id and not retire and BACKEND_CLIENT_ID_MARK not in client_id:
        raise CommandError(
            f"--client-id {client_id!r} must contain {BACKEND_CLIENT_ID_MARK!r} "
            "(e.g. farm-bridge/<name>): a device's client id is its serial, which never does"
        )


def _stop_when_drained(bridge: MqttBridge, stop: threading.Event) -> None:
    """``--retire``: stop once connected and nothing arrived for ``RETIRE_QUIET_S``."""
    seen, quiet_since = -1, time.monotonic()
    while not stop.wait(0.2):
        received = sum(bridge.stats.received.values())
        if received != seen or not bridge.wait_connected(0):
            seen, quiet_since = received, time.monotonic()
        elif time.monotonic() - quiet_since >= RETIRE_QUIET_S:
            stop.set()


def _embedded_broker_start(config: MqttConfig) -> None:
    """MQTT_URL unset: start the embedded broker through the callable the settings name
    (``MQTT_EMBEDDED_BROKER_STARTER``, set by the dev and test settings only)."""
    starter = settings.MQTT_EMBEDDED_BROKER_STARTER
    if not starter:
        raise CommandError(
            "MQTT_URL is unset and these settings start no embedded MQTT broker: "
            "set MQTT_URL=mqtt://host:1883"
        )
    import_string(starter)(config)


def _heartbeat(client_id: str, connected: bool) -> None:
    """Record the bridge's sign of life for /health, on a fresh connection if the old died."""
    from django.db import close_old_connections

    from devices.services.heartbeat import bridge_heartbeat

    close_old_connections()
    bridge_heartbeat(client_id=client_id, connected=connected)
