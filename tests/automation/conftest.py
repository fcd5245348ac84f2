"""Fixtures shared by the dispatcher's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config.env import MqttConfig
from devices.mqtt.publisher import Publisher


@pytest.fixture(scope="module")
def publisher(mqtt_config: MqttConfig) -> Iterator[Publisher]:
    """One connected publisher per module, as a dispatch worker holds one per process."""
    pub = Publisher(config=mqtt_config)
    pub.start()
    yield pub
    pub.close()
