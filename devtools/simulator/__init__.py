"""A fleet of simulated devices speaking the firmware contract over real MQTT, for tests,
the demo and the chaos suite: ``fleet`` holds the MQTT side, ``devices`` what a device does."""

from devtools.simulator.devices import FaultMode, SimulatedDevice, SimulatorStats, TelemetryWave
from devtools.simulator.fleet import DeviceSimulator

__all__ = ["DeviceSimulator", "FaultMode", "SimulatedDevice", "SimulatorStats", "TelemetryWave"]
