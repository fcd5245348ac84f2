"""The MQTT bridge, the only MQTT subscriber (its guarantee is stated at the top of ``loop``):
``loop`` drives the MQTT client, ``batcher`` commits messages in batches, ``limits`` bounds
floods, ``session`` keys the broker session and backs off when another client takes it
over. The names other modules use are re-exported here."""

from devices.mqtt.bridge.batcher import Handoff
from devices.mqtt.bridge.limits import DropRecorder
from devices.mqtt.bridge.loop import MqttBridge
from devices.mqtt.bridge.session import SessionTakenOver
from devices.mqtt.bridge.stats import BridgeStats

__all__ = [
    "BridgeStats",
    "DropRecorder",
    "Handoff",
    "MqttBridge",
    "SessionTakenOver",
]
