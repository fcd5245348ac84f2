"""Development tools, installed by the dev and test settings only: the device simulator, the
embedded MQTT broker, the in-process worker and beat, the demo and the benchmarks. No
product module imports this package (a test walks their imports)."""
