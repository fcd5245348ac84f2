"""Behind a transaction-pooling PgBouncer (the runbook's advice once workers outnumber
``max_connections``), ``DATABASE_TRANSACTION_POOLING`` keeps every path working: no
statement is prepared and no cursor outlives its transaction. The pooler here is PgBouncer
itself, private to the test, handing one client's transactions to two server sessions in
turn, so whatever leaks from one transaction into the next fails at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from config.env import SettingError
from config.env_database import database_from_env
from tests.mqtt_fixtures import LOOPBACK, free_port, port_open
from tests.real_servers import child_database_url
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
needs_pgbouncer = pytest.mark.skipif(
    PGBOUNCER is None, reason="needs PgBouncer (Debian's pgbouncer package; .ci/run installs it)"
)
CHECK_TIMEOUT_S = 120

# Round robin over a minimum pool of two: a client's consecutive transactions run on two
# server sessions, so a session's leftovers are missing from the very next transaction.
PGBOUNCER_INI = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = {listen}
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
server_round_robin = 1
min_pool_size = 2
default_pool_size = 10
ignore_startup_parameters = extra_float_digits
"""


class PrivatePgBouncer:
    """A PgBouncer of this test's own in transaction mode on a free port, in front of the
    test's PostgreSQL (every database name passes through to it)."""

    START_TIMEOUT_S = 10.0

    def __init__(self, workdir: Path, server_host: str, server_port: int) -> None:
        self.port = free_port()
        auth_file = workdir / "users.txt"
        auth_file.write_text('"postgres" ""\n')
        self.ini = workdir / "pgbouncer.ini"
        self.ini.write_text(
            PGBOUNCER_INI.format(
                host=server_host,
                port=server_port,
                listen=LOOPBACK,
                listen_port=self.port,
                auth_file=auth_file,
            )
        )
        self.log = workdir / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert PGBOUNCER is not None
        as_user = ["-u", "postgres"] if os.geteuid() == 0 else []  # it refuses to run as root
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [PGBOUNCER, *as_user, str(self.ini)], stdout=log, stderr=subprocess.STDOUT
            )
        wait_for(
            lambda: port_open(self.port) or self.process is None or self.process.poll() is not None,
            "PgBouncer to listen",
            self.START_TIMEOUT_S,
        )
        if self.process.poll() is not None:
            raise AssertionError(f"PgBouncer did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Its server sessions end with it, so the test database can be dropped after."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def url(self, database_url: str) -> str:
        """``database_url`` with this pooler as its host and port."""
        parts = urlsplit(database_url)
        auth = parts.netloc.rpartition("@")[0]
        return urlunsplit(parts._replace(netloc=f"{auth}@{LOOPBACK}:{self.port}"))


@pytest.fixture
def pgbouncer(tmp_path: Path) -> Iterator[PrivatePgBouncer]:
    settings = connection.settings_dict
    pooler = PrivatePgBouncer(tmp_path, settings["HOST"] or LOOPBACK, int(settings["PORT"] or 5432))
    pooler.start()
    try:
        yield pooler
    finally:
        pooler.stop()


def _checks(
    pooler: PrivatePgBouncer, pooling: str, *checks: str
) -> subprocess.CompletedProcess[str]:
    """``tests.common.pooled_session``'s ``checks`` in a process whose connection goes through
    ``pooler``, with ``DATABASE_TRANSACTION_POOLING=pooling``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": pooler.url(child_database_url()),
        "DATABASE_TRANSACTION_POOLING": pooling,
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.common.pooled_session", "sessions_alternate", *checks],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )


@pytest.mark.postgres
@needs_pgbouncer
@pytest.mark.django_db(transaction=True)
def test_the_hot_path_and_the_admin_chart_work_through_transaction_pooling(
    pgbouncer: PrivatePgBouncer,
) -> None:
    done = _checks(pgbouncer, "1", "hot_path", "admin_chart")
    assert done.returncode == 0, done.stderr[-3000:]
    ran = ["ok sessions_alternate", "ok hot_path", "ok admin_chart"]
    assert done.stdout.splitlines() == ran


@pytest.mark.postgres
@needs_pgbouncer
@pytest.mark.django_db(transaction=True)
def test_without_the_setting_the_admin_chart_breaks_behind_the_pooler(
    pgbouncer: PrivatePgBouncer,
) -> None:
    """What the setting is for: the chart's server-side cursor, declared in one transaction,
    is missing from the session the next one runs on."""
    done = _checks(pgbouncer, "0", "admin_chart")
    assert done.returncode != 0
    assert "ok sessions_alternate" in done.stdout
    assert "cursor" in done.stderr and "does not exist" in done.stderr, done.stderr[-3000:]


@pytest.mark.postgres
@needs_pgbouncer
@pytest.mark.django_db(transaction=True)
def test_a_prepared_statement_breaks_behind_the_pooler(pgbouncer: PrivatePgBouncer) -> None:
    """Why hot SQL must not prepare there: PgBouncer before 1.21 keeps no prepared statement
    across the server sessions it hands a client."""
    settings = connection.settings_dict
    with psycopg.connect(
        host=LOOPBACK,
        port=pgbouncer.port,
        user=settings["USER"],
        dbname=settings["NAME"],
        autocommit=True,
        prepare_threshold=100,  # only what asks to be prepared
    ) as client:

        def sessions() -> int:
            pids = [client.execute("SELECT pg_backend_pid()").fetchone() for _ in "ab"]
            return len({row[0] for row in pids if row})

        wait_for(lambda: sessions() == 2, "two server sessions in turn")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            for _ in range(2):
                client.execute("SELECT %s::int + 1", [1], prepare=True)


@pytest.mark.postgres
@pytest.mark.django_db
def test_hot_sql_prepares_only_where_the_connection_prepares() -> None:
    from common.hot_sql import hot_rows

    prepared = "SELECT count(*) FROM pg_prepared_statements"
    connection.ensure_connection()
    raw = connection.connection
    assert raw.prepare_threshold == 5  # config/env.py's default on a direct connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, None  # transaction pooling's
    try:
        raw.execute("DEALLOCATE ALL")
        hot_rows("SELECT 2 + %s", [2])
        assert hot_rows(prepared) == [(0,)]
    finally:
        raw.prepare_threshold = threshold
    hot_rows("SELECT 3 + %s", [3])
    assert hot_rows(prepared)[0][0] >= 1


def test_the_setting_turns_off_what_outlives_a_transaction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:6432/farm")
    monkeypatch.setenv("DATABASE_TRANSACTION_POOLING", "true")
    pooled = database_from_env(tmp_path)
    assert pooled["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert (
        "prepare_threshold" in pooled["OPTIONS"] and pooled["OPTIONS"]["prepare_threshold"] is None
    )
    assert pooled["CONN_MAX_AGE"] > 0  # the client's connection to PgBouncer is kept
    monkeypatch.delenv("DATABASE_TRANSACTION_POOLING")
    direct = database_from_env(tmp_path)
    assert direct["DISABLE_SERVER_SIDE_CURSORS"] is False
    assert direct["OPTIONS"]["prepare_threshold"] == 5  # the hot path's statements prepare


def test_a_bad_value_stops_start_up_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_TRANSACTION_POOLING", "transaction")
    with pytest.raises(SettingError, match=r"^DATABASE_TRANSACTION_POOLING='transaction'"):
        database_from_env(ROOT)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**env, "DATABASE_TRANSACTION_POOLING": "maybe"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "DATABASE_TRANSACTION_POOLING='maybe' is invalid: expected true/false"
    ]
