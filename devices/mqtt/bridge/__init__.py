"""The MQTT bridge, the only MQTT subscriber; its guarantee is stated at the top of ``loop``.
The names other modules use are re-exported here."""

from devices.mqtt.bridge.loop import DEVICE_MESSAGES_TASK, TELEMETRY_TASK, MqttBridge, _decode

__all__ = ["DEVICE_MESSAGES_TASK", "TELEMETRY_TASK", "MqttBridge", "_decode"]
