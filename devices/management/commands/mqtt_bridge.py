"""`manage.py mqtt_bridge`: the MQTT bridges as a process of its own (docs/spec.md §1), one per
bridge slot this process holds (``BridgeSupervisor``; none is a valid standby). The command
owns only the process concerns: signals for a clean stop (which hands the slots over),
progress lines, exit on a fatal refusal or when another client keeps taking a held slot's
session over. What happens to each message lives in MqttBridge; ``--retire`` runs one bridge
to drain and end an old session."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge, SessionTakenOver
from devices.mqtt.bridge.slots import BridgeSupervisor, Heartbeat
from devices.mqtt.client import MqttUnavailable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Exit status after SessionTakenOver: a configuration error (EX_CONFIG), which the systemd
# unit does not restart (RestartPreventExitStatus), since a restart resumes the fight.
EXIT_SESSION_TAKEN_OVER = 78
RETIRE_QUIET_S = 3.0  # --retire: nothing received for this long means the session is drained


class Command(BaseCommand):
    help = (
        "Run the MQTT bridges of the slots this process holds (BRIDGE_SLOTS, leases in the "
        "database): subscribe to device telemetry, RPC responses and state reports, hand them "
        "to Celery in batches and acknowledge MQTT only after each hand-off. SIGTERM or "
        "Ctrl-C stops it cleanly, keeping the broker sessions and handing the slots over."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--client-id",
            default=None,
            help="with --retire only: the MQTT client id whose session to end (an old "
            "farm-bridge/<hostname>, or a slot beyond a reduced BRIDGE_SLOTS); a running "
            "bridge's client id is its slot's, <BRIDGE_SLOT_PREFIX>/<n>",
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
        stop = threading.Event()
        previous = self._install_signal_handlers(stop)
        if opts["duration"] > 0:
            timer = threading.Timer(opts["duration"], stop.set)
            timer.daemon = True
            timer.start()
        try:
            if opts["retire"]:
                self._retire(config, opts, stop)
            else:
                self._slots(config, opts, stop)
        except MqttUnavailable as exc:
            raise CommandError(f"MQTT broker refused the bridge: {exc}") from exc
        except SessionTakenOver as exc:
            raise CommandError(str(exc), returncode=EXIT_SESSION_TAKEN_OVER) from exc
        finally:
            stop.set()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _slots(self, config: MqttConfig, opts: dict[str, Any], stop: threading.Event) -> None:
        """The bridges of the slots this process holds, until ``stop``."""

        def bridge_make(client_id: str, heartbeat: Heartbeat) -> MqttBridge:
            return MqttBridge(
                config=config,
                client_id=client_id,
                batch_size=opts["batch_size"],
                flush_ms=opts["flush_ms"],
                heartbeat=heartbeat,
            )

        supervisor = BridgeSupervisor(bridge_factory=bridge_make)
        self.stdout.write(
            f"MQTT bridge slots {settings.BRIDGE_SLOT_PREFIX}/0..{settings.BRIDGE_SLOTS - 1} "
            f"(lease {settings.BRIDGE_LEASE_S:g}s) as {supervisor.holder} on "
            f"{config.host}:{config.port} ({_mqtt_described(config)}); SIGTERM or Ctrl-C stops"
        )
        progress = threading.Thread(
            target=self._progress,
            args=(supervisor.bridges, stop, opts["progress_interval"]),
            daemon=True,
        )
        progress.start()
        try:
            supervisor.run_forever(stop)
        finally:
            stop.set()
            progress.join(timeout=1)
        self.stdout.write("stopped: every slot handed over")

    def _retire(self, config: MqttConfig, opts: dict[str, Any], stop: threading.Event) -> None:
        """One bridge on ``--client-id``: hand off what its session holds, then end it."""
        bridge = MqttBridge(
            config=config,
            client_id=opts["client_id"],
            batch_size=opts["batch_size"],
            flush_ms=opts["flush_ms"],
            retire=True,
        )
        threading.Thread(target=_stop_when_drained, args=(bridge, stop), daemon=True).start()
        progress = threading.Thread(
            target=self._progress,
            args=(lambda: {0: bridge}, stop, opts["progress_interval"]),
            daemon=True,
        )
        self.stdout.write(
            f"MQTT bridge retiring {bridge.client_id} on {config.host}:{config.port} "
            f"({_mqtt_described(config)}); SIGTERM or Ctrl-C stops"
        )
        progress.start()
        try:
            bridge.run_forever(stop)
        finally:
            stop.set()
            progress.join(timeout=1)
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

    def _progress(
        self,
        bridges: Callable[[], dict[int, MqttBridge]],
        stop: threading.Event,
        interval_s: float,
    ) -> None:
        """A line per slot held (its bridge's stats), or one saying this is a standby."""
        if interval_s <= 0:
            return
        started = time.monotonic()
        while not stop.wait(interval_s):
            at = f"t={time.monotonic() - started:7.1f}s"
            running = bridges()
            if not running:
                self.stdout.write(f"{at} standby: holding no slot")
            for slot, bridge in sorted(running.items()):
                self.stdout.write(
                    f"{at} slot {slot} "
                    f"{'connected' if bridge.wait_connected(0) else 'DISCONNECTED'} "
                    f"{bridge.stats.summary()}"
                )


def _check_client_id(client_id: str | None, *, retire: bool) -> None:
    """``--client-id`` names the session ``--retire`` ends, and nothing else: a running
    bridge's id is its slot's, held through a lease."""
    if retire and not client_id:
        raise CommandError("--retire needs --client-id: the id whose session to end")
    if client_id and not retire:
        raise CommandError(
            f"--client-id {client_id!r} is only for --retire: a bridge's client id is the "
            "slot it holds, <BRIDGE_SLOT_PREFIX>/<n> (BRIDGE_SLOTS, BRIDGE_SLOT_PREFIX)"
        )


def _mqtt_described(config: MqttConfig) -> str:
    group = config.shared_group
    return (
        f"MQTT {'5' if config.protocol == 5 else '3.1.1'}, "
        f"{'shared group ' + group if group else 'no shared group'}"
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
