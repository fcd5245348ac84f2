"""`manage.py device_simulator`: simulated devices as a process of their own, against the
configured broker, so the backend can be exercised like a real fleet (and faulted on
purpose). The command owns only its loop; the devices live in DeviceSimulator."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.env import MqttConfig
from config.tables import format_table
from devices.mqtt.contract import ResultCode
from devtools.simulator import DeviceSimulator, FaultMode, SimulatedDevice, TelemetryWave

DEFAULT_VALUES: dict[str, object] = {"temp": 20.0, "io1": False}


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict) or not value:
        raise argparse.ArgumentTypeError("expected a non-empty JSON object of endpoint values")
    return value


def counters_write(simulator: DeviceSimulator, path: str) -> None:
    """``{"commands": {serial: {command_id: {"requests": n, "applies": n, "acks": n}}},
    "values": {serial: {...}}}``, written to a temporary file and renamed so that a reader
    never sees half a file."""
    commands: dict[str, dict[str, dict[str, int]]] = {}
    for name, counter in (
        ("requests", simulator.requests),
        ("applies", simulator.applies),
        ("acks", simulator.acks),
    ):
        for (serial, command_id), count in counter.items():
            commands.setdefault(serial, {}).setdefault(command_id, {})[name] = count
    values = {serial: simulator.values_of(serial) for serial in simulator.serials}
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"commands": commands, "values": values}, fh)
    os.replace(tmp, path)


def parse_fault(spec: str) -> tuple[str | None, FaultMode, int | None]:
    """``[SERIAL=]MODE[:TIMES]`` -> (serial or None, mode, fault_times or None)."""
    serial, _, rest = spec.rpartition("=")
    mode, _, times = rest.partition(":")
    try:
        fault = FaultMode(mode.strip())
    except ValueError:
        allowed = ", ".join(m.value for m in FaultMode)
        raise CommandError(f"--fault {spec!r}: mode must be one of {allowed}") from None
    if times and (not times.isdigit() or int(times) < 1):
        raise CommandError(f"--fault {spec!r}: TIMES must be a positive integer")
    return serial or None, fault, int(times) if times else None


def _wave(text: str) -> TelemetryWave:
    """``KEY:LOW:HIGH:PERIOD_S``, e.g. ``temp:16:34:120``."""
    key, *numbers = text.split(":")
    try:
        low, high, period = (float(n) for n in numbers)
        return TelemetryWave(key, low, high, period)
    except ValueError as exc:
        why = str(exc) if len(numbers) == 3 else "expected KEY:LOW:HIGH:PERIOD_S"
        raise argparse.ArgumentTypeError(f"{text!r}: {why}") from None


class Command(BaseCommand):
    help = (
        "Run simulated devices that implement the firmware contract (docs/spec.md §3.7) over MQTT. "
        "--fault MODE[:TIMES] is dealt to the devices in turn (repeat it to mix faults); "
        "SERIAL=MODE[:TIMES] targets one device. TIMES limits the fault to the first TIMES "
        "requests of each commandId."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=4, help="number of devices")
        parser.add_argument("--prefix", default="SIM", help="serials are PREFIX-0001...")
        parser.add_argument(
            "--serials",
            nargs="+",
            help="explicit serials (overrides --devices/--prefix); commas also separate",
        )
        parser.add_argument("--fault", action="append", default=[], metavar="[SERIAL=]MODE[:TIMES]")
        parser.add_argument(
            "--reject-code",
            default=ResultCode.BUSY.value,
            choices=[c.value for c in ResultCode if c is not ResultCode.OK],
        )
        parser.add_argument("--delay", type=float, default=1.0, help="delay_ack seconds")
        parser.add_argument("--offline", type=float, default=10.0, help="offline seconds")
        parser.add_argument(
            "--telemetry-interval",
            type=float,
            default=5.0,
            help="seconds between telemetry per device; 0 disables",
        )
        parser.add_argument(
            "--wave",
            type=_wave,
            default=None,
            metavar="KEY:LOW:HIGH:PERIOD_S",
            help="periodic telemetry swings KEY between LOW and HIGH every PERIOD_S seconds "
            "(a sine, each device out of phase), so threshold rules keep firing",
        )
        parser.add_argument(
            "--duration", type=float, default=0.0, help="seconds to run; 0 runs until interrupted"
        )
        parser.add_argument("--progress-interval", type=float, default=5.0)
        parser.add_argument("--client-id", default=None)
        parser.add_argument(
            "--values",
            type=_json_object,
            default=None,
            help="initial endpoint values of every device as JSON, e.g. '{\"io1\": false}'",
        )
        parser.add_argument(
            "--counters",
            default=None,
            metavar="PATH",
            help="write per-commandId requests/applies/acks as JSON to PATH at every progress "
            "line and on exit, so another process can check that nothing applied twice",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        devices = self._devices(opts)
        config: MqttConfig = settings.MQTT
        if config.embedded:
            from devtools.embedded_broker import ensure_embedded_broker

            ensure_embedded_broker(config)
        interval = opts["telemetry_interval"] or None
        client_id = opts["client_id"] or f"device-simulator-{os.getpid()}"
        simulator = DeviceSimulator(
            devices,
            config=config,
            telemetry_interval_s=interval,
            client_id=client_id,
            wave=opts["wave"],
        )
        stop = threading.Event()
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if in_main else None
        simulator.start()
        self.stdout.write(
            f"{len(devices)} devices on {config.host}:{config.port} "
            f"(MQTT {'5' if config.protocol == 5 else '3.1.1'}); Ctrl-C stops"
        )
        counters = opts["counters"]
        try:
            self._run(simulator, stop, opts["duration"], opts["progress_interval"], counters)
        except KeyboardInterrupt:
            pass
        finally:
            simulator.stop()
            if in_main:
                signal.signal(signal.SIGTERM, previous)
            if counters:
                counters_write(simulator, counters)
        self.stdout.write(self._final_table(simulator, devices))

    def _devices(self, opts: dict[str, Any]) -> list[SimulatedDevice]:
        if opts["serials"]:
            serials = [s for chunk in opts["serials"] for s in chunk.split(",") if s.strip()]
        else:
            if opts["devices"] < 1:
                raise CommandError("--devices must be >= 1")
            serials = [f"{opts['prefix']}-{i:04d}" for i in range(1, opts["devices"] + 1)]
        faults = [parse_fault(spec) for spec in opts["fault"]]
        targeted = {serial: (mode, times) for serial, mode, times in faults if serial}
        unknown = set(targeted) - set(serials)
        if unknown:
            raise CommandError(f"--fault names unknown serials: {', '.join(sorted(unknown))}")
        dealt = [(mode, times) for serial, mode, times in faults if serial is None]
        devices = []
        for index, serial in enumerate(serials):
            mode, times = targeted.get(serial) or (
                dealt[index % len(dealt)] if dealt else (FaultMode.NONE, None)
            )
            try:
                devices.append(
                    SimulatedDevice(
                        serial,
                        dict(opts["values"] or DEFAULT_VALUES),
                        mode,
                        opts["reject_code"],
                        opts["delay"],
                        opts["offline"],
                        times,
                    )
                )
            except ValueError as exc:
                raise CommandError(f"device {serial}: {exc}") from None
        if len({d.serial for d in devices}) != len(devices):
            raise CommandError("serials must be unique")
        return devices

    def _run(
        self,
        simulator: DeviceSimulator,
        stop: threading.Event,
        duration_s: float,
        progress_s: float,
        counters: str | None = None,
    ) -> None:
        started = time.monotonic()
        deadline = started + duration_s if duration_s > 0 else None
        while not stop.is_set():
            wait = progress_s if progress_s > 0 else 3600.0
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if wait > 0 and stop.wait(wait):
                break
            stats = simulator.stats()
            self.stdout.write(
                f"t={time.monotonic() - started:6.1f}s requests={stats.requests} "
                f"applies={stats.applies} acks={stats.acks} states={stats.state_reports} "
                f"telemetry={stats.telemetry} malformed={stats.malformed} "
                f"ignored_offline={stats.ignored_offline}"
            )
            if counters:
                counters_write(simulator, counters)
            if deadline is not None and time.monotonic() >= deadline:
                break

    @staticmethod
    def _final_table(simulator: DeviceSimulator, devices: list[SimulatedDevice]) -> str:
        def by_serial(counter: Counter[tuple[str, str]]) -> Counter[str]:
            totals: Counter[str] = Counter()
            for (serial, _), count in counter.items():
                totals[serial] += count
            return totals

        requests, applies = by_serial(simulator.requests), by_serial(simulator.applies)
        acks, states = by_serial(simulator.acks), by_serial(simulator.state_reports)
        rows = []
        for device in devices:
            fault = device.fault.value + (f":{device.fault_times}" if device.fault_times else "")
            values = ", ".join(f"{k}={v}" for k, v in simulator.values_of(device.serial).items())
            rows.append(
                (
                    device.serial,
                    fault,
                    requests[device.serial],
                    applies[device.serial],
                    acks[device.serial],
                    states[device.serial],
                    values,
                )
            )
        stats = simulator.stats()
        rows.append(
            (
                "total",
                "",
                stats.requests,
                stats.applies,
                stats.acks,
                stats.state_reports,
                f"malformed={stats.malformed}",
            )
        )
        return "\n" + format_table(
            ["serial", "fault", "requests", "applies", "acks", "states", "values"], rows
        )
