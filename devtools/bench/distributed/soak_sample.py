"""What a soak reads at each interval besides its crossings: each process's resident memory
(with its pool's children), the servers' processes when they run on this machine, and the
rows, bytes and dead tuples of every table the pipeline appends to. A table partitioned by
time is summed over its partitions, so the figures mean the same before and after the
tables are partitioned and while partitions are created and dropped."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil
from django.apps import apps
from django.conf import settings
from django.db import connection

from common.retention import retentions
from config.env import MqttConfig

SERVERS = ("postgresql", "redis", "mosquitto")


def tree_rss_bytes(pid: int) -> int | None:
    """Resident bytes of ``pid`` and its descendants (a prefork pool); None once it is gone.
    Pages a pool child shares with its parent count in both, as the kernel reports them.
    The bench counts alone: its descendants are the stack, measured apart."""
    try:
        root = psutil.Process(pid)
        own = pid == os.getpid()
        procs = [root, *([] if own else root.children(recursive=True))]
    except psutil.Error:
        return None
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _server_addresses() -> dict[str, tuple[str, int]]:
    db = settings.DATABASES["default"]
    broker = urlsplit(settings.CELERY_BROKER_URL)
    mqtt: MqttConfig = settings.MQTT
    found = {
        "postgresql": (str(db.get("HOST") or "localhost"), int(db.get("PORT") or 5432)),
        "mosquitto": (mqtt.host, mqtt.port),
    }
    if broker.scheme.startswith("redis"):
        found["redis"] = (broker.hostname or "localhost", broker.port or 6379)
    return found


def server_pids() -> dict[str, int]:
    """The pid listening on each server's configured loopback port (PostgreSQL's postmaster:
    its backends are its children); a server elsewhere, or one this user cannot see, is
    left out."""
    wanted = {port: name for name, (host, port) in _server_addresses().items() if _loopback(host)}
    pids: dict[str, int] = {}
    try:
        listening = psutil.net_connections(kind="tcp")
    except (psutil.Error, PermissionError):
        return pids
    for conn in listening:
        if conn.status == psutil.CONN_LISTEN and conn.pid and conn.laddr.port in wanted:
            pids.setdefault(wanted[conn.laddr.port], conn.pid)
    return pids


@dataclass(frozen=True)
class TableSample:
    table: str
    rows: int
    bytes: int  # pg_total_relation_size: heap, TOAST and indexes, every partition
    dead: int  # pg_stat_user_tables.n_dead_tup over every partition
    partition_names: frozenset[str] = frozenset()  # empty: a plain table

    @property
    def partitions(self) -> int:
        return len(self.partition_names)

    def as_json(self) -> dict[str, int | str]:
        return {"table": self.table, "rows": self.rows, "bytes": self.bytes,
                "dead_tuples": self.dead, "partitions": self.partitions}  # fmt: skip


def measured_tables() -> list[str]:
    """Every table with a retention and the tables pruned with them, in prune order."""
    labels: list[str] = []
    for retention in retentions():
        for label in (retention.label, *retention.children):
            if label not in labels:
                labels.append(label)
    return [apps.get_model(label)._meta.db_table for label in labels]


# A plain table is not in its own partition tree (pg_partition_tree returns no row for it).
_TREE = "SELECT %s::regclass AS relid UNION SELECT relid FROM pg_partition_tree(%s::regclass)"


def table_sample(table: str) -> TableSample:
    qn = connection.ops.quote_name
    with connection.cursor() as cur:
        cur.execute(
            f"WITH tree AS ({_TREE}) SELECT c.relname, c.relispartition AND c.relkind = 'r', "
            "pg_total_relation_size(t.relid), coalesce(s.n_dead_tup, 0) "
            "FROM tree t JOIN pg_class c ON c.oid = t.relid "
            "LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid",
            [table, table],
        )
        tree = cur.fetchall()
        cur.execute(f"SELECT count(*) FROM {qn(table)}")
        (rows,) = cur.fetchone()
    return TableSample(
        table,
        int(rows),
        sum(int(size) for _, _, size, _ in tree),
        sum(int(dead) for _, _, _, dead in tree),
        frozenset(name for name, leaf, _, _ in tree if leaf),
    )


def tables_sample(tables: list[str]) -> list[TableSample]:
    return [table_sample(t) for t in tables]


def rss_sample(pids: Mapping[str, int]) -> dict[str, int | None]:
    return {name: tree_rss_bytes(pid) for name, pid in pids.items()}
