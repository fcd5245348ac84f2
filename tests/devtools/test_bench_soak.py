"""The pure parts of ``bench --distributed --soak``: the trend verdict a soak fails on
(a flat, a noisy flat and a rising series, a short run's window, too few samples), the
settings it derives for every process, the shaping of its figures, and its options (a bad
value is a CommandError naming the option). The soak itself needs the real servers for as
long as it runs and is exercised by hand."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from devtools.bench.distributed.cli import plan_from_options
from devtools.bench.distributed.plan import PlanError
from devtools.bench.distributed.results import APPLIED, StepResult
from devtools.bench.distributed.soak_plan import (
    DEFAULT_INTERVAL_S,
    DEFAULT_RATE,
    RETENTION_FLOOR_S,
    RETENTION_SETTINGS,
    SoakPlan,
    soak_from_options,
)
from devtools.bench.distributed.soak_report import (
    Interval,
    partitions_rolled,
    soak_series,
    storage_cost,
    summary_table,
)
from devtools.bench.distributed.soak_sample import TableSample
from devtools.bench.distributed.trend import (
    LATENCY,
    MIB,
    NOT_JUDGED,
    OK,
    RISING,
    RSS,
    TABLE_BYTES,
    UNJUDGED,
    Series,
    Tolerance,
    slope,
    trend_fit,
    trends_fit,
    trends_table,
    window_start,
)

HOUR = 3600.0


def series(values: list[float], *, every_s: float = 300.0, tolerance: Tolerance = RSS) -> Series:
    s = Series("s", tolerance)
    for n, value in enumerate(values):
        s.add(n * every_s, value)
    return s


# -- trend ----------------------------------------------------------------------------


def test_the_slope_is_the_least_squares_line() -> None:
    assert slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert slope([(0, 4), (10, 4)]) == 0.0
    assert slope([(5, 1)]) == 0.0 and slope([(5, 1), (5, 9)]) == 0.0


def test_an_hour_is_fitted_over_its_last_40_minutes_a_shorter_run_over_two_thirds() -> None:
    assert window_start(0, 2 * HOUR) == 2 * HOUR - 2400
    assert window_start(0, HOUR) == HOUR - 2400  # an hour: 40 minutes are two thirds
    assert window_start(0, 300) == pytest.approx(100)
    assert window_start(60, 360) == pytest.approx(160)


def test_a_flat_series_passes() -> None:
    trend = trend_fit(series([200.0] * 13), since_s=0)
    assert trend.verdict == OK and trend.per_hour == 0 and not trend.failed
    assert trend.tolerance == pytest.approx(10.0)  # 5 % of 200 MiB above the 8 MiB floor


def test_a_noisy_flat_series_passes() -> None:
    rng = random.Random(26)
    noisy = [300.0 + rng.uniform(-60, 60) for _ in range(9)]  # p99 ms from interval to interval
    trend = trend_fit(series(noisy, tolerance=LATENCY), since_s=0)
    assert trend.verdict == OK, trend
    assert trend.tolerance == pytest.approx(max(0.3 * trend.mean, 100.0))


def test_a_rising_series_fails_and_a_falling_one_does_not() -> None:
    leak = [200.0 + 2.0 * n for n in range(9)]  # 16 MiB over the window: past 5 % of ~208
    trend = trend_fit(series(leak), since_s=0)
    assert trend.failed and trend.verdict == RISING
    assert trend.per_hour == pytest.approx(24.0)  # 2 MiB per 5 minutes
    assert trend.rise == pytest.approx(16.0) and trend.rise > trend.tolerance
    assert (trend.start, trend.end) == (200.0, 216.0)
    assert trend_fit(series(leak[::-1]), since_s=0).verdict == OK


def test_a_rise_below_the_noise_floor_passes() -> None:
    small = [1.0 * n for n in range(9)]  # table MiB: 8 MiB rise, 20 % of a 4 MiB mean is 0.8
    assert trend_fit(series(small, tolerance=TABLE_BYTES), since_s=0).failed
    tiny = [0.01 * n for n in range(9)]  # 0.08 MiB: under the 1 MiB floor
    assert trend_fit(series(tiny, tolerance=TABLE_BYTES), since_s=0).verdict == OK


def test_warm_up_before_the_window_is_not_judged() -> None:
    # A process that grows while it warms up, then stays flat: only the flat part is fitted.
    s = series([100.0, 150.0, 190.0, 200.0, 200.0, 201.0, 200.0, 200.0, 200.0, 200.0])
    trends = trends_fit([s])
    assert trends[0].verdict == OK and trends[0].points == 7
    assert trend_fit(s, since_s=0).failed  # the same samples fitted whole would rise


def test_a_short_run_uses_its_last_two_thirds_and_too_few_samples_get_no_verdict() -> None:
    short = series([100.0, 100.0, 140.0, 180.0], every_s=30)  # 90 s: the last 60 s fitted
    assert trends_fit([short])[0].points == 3 and trends_fit([short])[0].failed
    few = trend_fit(series([1.0, 50.0], every_s=30), since_s=0)
    assert few.verdict == UNJUDGED and not few.failed and math.isnan(few.rise)


def test_a_server_is_shown_but_never_fails_the_run() -> None:
    s = Series("RSS postgresql", RSS, judged=False)
    for n in range(9):
        s.add(n * 300.0, 200.0 + 50 * n)
    assert trend_fit(s, since_s=0).verdict == NOT_JUDGED
    assert not trend_fit(s, since_s=0).failed


def test_the_trends_table_states_each_tolerance_next_to_its_slope() -> None:
    table = trends_table(trends_fit([series([200.0 + 4.0 * n for n in range(9)])]))
    assert "max(5% of mean, 8 MiB)" in table and "FAIL (rising)" in table and "+48.00" in table


# -- settings and figures -------------------------------------------------------------------


def test_retention_is_a_sixth_of_the_run_and_every_setting_goes_to_every_process() -> None:
    hour = SoakPlan(seconds=HOUR, rate=75, retention_s=600)
    env = hour.env()
    assert set(RETENTION_SETTINGS) <= set(env)
    assert float(env["RETENTION_TELEMETRY_DAYS"]) == pytest.approx(600 / 86400, rel=1e-5)
    assert env["TELEMETRY_PARTITION_SPAN_S"] == "300"
    assert env["RETENTION_PRUNE_INTERVAL_S"] == "30"
    assert env["TELEMETRY_ROLLUP_INTERVAL_S"] == "60"
    assert "RETENTION_ROLLUPS_DAYS" not in env  # rollups are hourly: kept as configured
    assert hour.migrate_settings()["TELEMETRY_MAX_AGE_S"] == 600
    short = SoakPlan(seconds=300, rate=5, interval_s=30, retention_s=RETENTION_FLOOR_S)
    assert short.partition_span_s == 60 and short.prune_interval_s == 15


def _interval(index: int, t_s: float, *, applied_ms: list[float], table_bytes: int) -> Interval:
    i = Interval(index, t_s, 30.0)
    step = StepResult(index, 5.0, 30.0, len(applied_ms), Counter({APPLIED: len(applied_ms)}))
    step.created = len(applied_ms)
    step.to_rpc_ms, step.to_applied_ms = list(applied_ms), list(applied_ms)
    i.add(step)
    i.rss = {"ingest": 300 * int(MIB), "postgresql": 200 * int(MIB)}
    i.tables = [
        TableSample("devices_telemetry", 1000, table_bytes, 5, frozenset({f"p{index}", "d"})),
        TableSample("automation_automationcommandintent", 100, table_bytes // 2, 0),
    ]
    return i


def test_interval_figures_become_series_a_summary_and_storage_per_command() -> None:
    intervals = [_interval(n, n * 30.0, applied_ms=[100.0, 200.0], table_bytes=3 << 20)
                 for n in range(1, 7)]  # fmt: skip
    names = [s.name for s in soak_series(intervals)]
    assert names[:2] == ["reading → RPC p99", "reading → applied p99"]
    assert "RSS ingest" in names and "bytes devices_telemetry" in names
    by_name = {s.name: s for s in soak_series(intervals)}
    assert not by_name["RSS postgresql"].judged and by_name["RSS ingest"].judged
    assert "0:03:00" in summary_table(intervals)
    cost = storage_cost(intervals, 0.0, "automation_automationcommandintent", devices=600)
    assert cost.per_command == pytest.approx((3 << 20) * 1.5 / 100)
    assert cost.commands_per_s == pytest.approx(2 / 30)
    assert cost.per_device_day == pytest.approx(cost.per_command * (2 / 30) * 86400 / 600)
    assert partitions_rolled(intervals) == {"devices_telemetry": (5, 5)}


# -- options ----------------------------------------------------------------------------


def _options(**given: object) -> dict[str, object]:
    opts: dict[str, object] = {
        "farms": None, "messages": None, "devices": None, "rows": None, "workers": "1,2,4",
        "only": None, "bridges": 1, "concurrency": "", "steps": "10,30", "step_seconds": 20.0,
        "settle_seconds": 90.0, "out": Path("out"), "json": None, "profile": False,
        "profile_format": "svg", "rate": None, "soak": None, "soak_interval": None,
        "soak_retention": None,
    }  # fmt: skip
    return opts | given


def test_soak_defaults_and_derived_retention() -> None:
    assert soak_from_options(_options()) is None
    soak = soak_from_options(_options(soak=3600.0))
    assert soak == SoakPlan(3600.0, DEFAULT_RATE, DEFAULT_INTERVAL_S, 600.0)
    short = soak_from_options(_options(soak=300.0, soak_interval=30.0, rate=5.0))
    assert short is not None and short.retention_s == RETENTION_FLOOR_S
    plan = plan_from_options(_options(soak=300.0, soak_interval=30.0, rate=5.0))
    assert plan.soak == short
    assert "--soak 300 --rate 5 --soak-interval 30 --soak-retention 120" in plan.command_line()


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"soak": 0.0}, "--soak"),
        ({"soak": -5.0}, "--soak"),
        ({"soak": math.nan}, "--soak"),
        ({"soak": 3600.0, "rate": 0.0}, "--rate"),
        ({"soak": 3600.0, "rate": -1.0}, "--rate"),
        ({"soak": 3600.0, "rate": math.inf}, "--rate"),
        ({"soak": 3600.0, "rate": 0.001}, "--rate"),
        ({"soak": 3600.0, "soak_interval": 0.0}, "--soak-interval"),
        ({"soak": 3600.0, "soak_interval": 1.0}, "--soak-interval"),
        ({"soak": 600.0}, "--soak 600 is shorter than 6 × --soak-interval"),
        ({"soak": 3600.0, "soak_retention": 60.0}, "--soak-retention"),
        ({"soak": 3600.0, "soak_retention": 2000.0}, "--soak-retention"),
        ({"soak_interval": 30.0}, "--soak-interval needs --soak"),
        ({"soak_retention": 600.0}, "--soak-retention needs --soak"),
        ({"soak": 3600.0, "profile": True}, "--profile"),
    ],
)
def test_a_bad_soak_option_is_a_plan_error_naming_it(given: dict[str, object], option: str) -> None:
    with pytest.raises(PlanError, match=option.replace("×", ".").replace("(", r"\(")):
        plan_from_options(_options(**given))


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--distributed", "--soak", "0"], "--soak"),
        (["--distributed", "--soak", "3600", "--rate", "0"], "--rate"),
        (["--distributed", "--soak", "3600", "--rate", "abc"], "--rate"),
        (["--distributed", "--soak", "3600", "--soak-interval", "-30"], "--soak-interval"),
        (["--distributed", "--soak", "100", "--soak-interval", "30"], "--soak"),
        (["--soak", "3600"], "--soak needs --distributed"),
        (["--distributed", "--soak-interval", "30"], "--soak-interval needs --soak"),
    ],
)
def test_the_command_refuses_a_bad_soak_option_before_it_starts_anything(
    argv: list[str], option: str
) -> None:
    with pytest.raises(CommandError, match=option):
        call_command("bench", *argv)
