"""The rules that decide, kept per process behind the configuration version
(``common.config_version``): evaluation reads no rule, condition or action from the database
while no configuration changed, and the first reading after a change (a rule edited through
the API, a device put in maintenance, an endpoint disabled) is decided by the new one.

What is held is configuration only: every active rule of a farm not archived, with its
further conditions, its actions and their target endpoints (device and profile endpoint).
What changes with each reading (last values, live commands, cool-downs, holds) is read from
the database every time. The objects are shared by every thread of the process: read them,
never change them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from automation.models import AutomationRule, Operator
from automation.services.conditions import Reading, condition_endpoints, rules_loaded
from automation.services.rule_checks import silence_seconds
from automation.services.watchdog import WatchdogHold
from common.config_version import ConfigCache, config_version


@dataclass(frozen=True)
class RuleSet:
    """The deciding rules by the endpoints whose readings make them evaluate, and the active
    watchdogs by the endpoints they drive."""

    triggered_by: dict[int, tuple[AutomationRule, ...]]
    watchdogs_driving: dict[int, tuple[AutomationRule, ...]]
    # Every rule's priority, deleted ones too: a live command names its rule, whatever it is
    # now, and ranks by that rule's priority (``automation.services.priority``).
    priorities: dict[int, int]
    # The endpoints whose readings a rule evaluates on (a watchdog's trigger is not one: it
    # fires on silence, see ``automation.services.watchdog``).
    evaluated: frozenset[int] = frozenset()

    def rules_triggered_by(self, endpoint_ids: Iterable[int]) -> list[AutomationRule]:
        """The rules a reading of any of these endpoints makes evaluate, by id, each once."""
        found = {r.pk: r for pk in endpoint_ids for r in self.triggered_by.get(pk, ())}
        return [found[pk] for pk in sorted(found)]

    def watchdogs_on(self, endpoint_ids: Iterable[int]) -> list[AutomationRule]:
        found = {r.pk: r for pk in endpoint_ids for r in self.watchdogs_driving.get(pk, ())}
        return [found[pk] for pk in sorted(found)]


def _rule_set_load() -> RuleSet:
    """Five queries, whatever the number of rules: the rules with their farms and targets,
    their conditions, their actions with their targets, and every rule's priority."""
    triggered_by: dict[int, list[AutomationRule]] = defaultdict(list)
    watchdogs: dict[int, list[AutomationRule]] = defaultdict(list)
    evaluated: set[int] = set()
    for rule in rules_loaded(AutomationRule.objects.all()):
        for endpoint_id in dict.fromkeys(condition_endpoints(rule)):
            triggered_by[endpoint_id].append(rule)
        if rule.operator != Operator.SILENT_FOR:
            evaluated |= set(condition_endpoints(rule))
            continue
        driven = {rule.target_endpoint_id, *(a.target_endpoint_id for a in rule.actions.all())}
        for endpoint_id in driven:
            watchdogs[endpoint_id].append(rule)
    return RuleSet(
        triggered_by={pk: tuple(rules) for pk, rules in triggered_by.items()},
        watchdogs_driving={pk: tuple(rules) for pk, rules in watchdogs.items()},
        priorities=dict(AutomationRule.objects.values_list("pk", "priority")),
        evaluated=frozenset(evaluated),
    )


# What the apps above this one read of readings as they come (the reminders' threshold
# metrics), each registered by its app when it is ready (``metric_readers_register``): this
# app sits below them and names none of their models.
_METRIC_READERS: list[Callable[[], Iterable[int]]] = []


def metric_readers_register(reader: Callable[[], Iterable[int]]) -> None:
    """``reader`` returns the endpoints whose readings it reads as they come, from its own
    configuration tables (watched by ``common.config_version``, so an edit reloads them)."""
    if reader not in _METRIC_READERS:
        _METRIC_READERS.append(reader)


def _metric_endpoints_load() -> frozenset[int]:
    """The endpoints the registered readers read (an active threshold reminder's metric)."""
    return frozenset(pk for reader in _METRIC_READERS for pk in reader())


_RULES = ConfigCache(_rule_set_load)
_METRIC_ENDPOINTS = ConfigCache(_metric_endpoints_load)


def rule_set() -> RuleSet:
    """The deciding rules as of the configuration version this transaction sees: one read of
    the version, and the rules again only when it moved."""
    return _RULES.get(config_version())


def metric_endpoints() -> frozenset[int]:
    """The endpoints an active threshold reminder reads, as of the configuration version."""
    return _METRIC_ENDPOINTS.get(config_version())


def endpoints_read() -> frozenset[int]:
    """The endpoints whose readings someone reads as they come: a deciding rule's condition,
    or an active threshold reminder's metric. Ingest stores a reading of any other endpoint
    as already evaluated (``automation.services.ingest``): it would be discarded as matching
    no rule after a Celery task's round trip, the one evaluation it could ever get. Its value
    stays for the chart, the proof of an applied command and the audit."""
    version = config_version()
    return _RULES.get(version).evaluated | _METRIC_ENDPOINTS.get(version)


def rule_set_loads() -> int:
    """How many times this process loaded the rules (tests, progress lines)."""
    return _RULES.loads


def watchdog_trigger_ids(rules: RuleSet, endpoint_ids: Iterable[int]) -> set[int]:
    """The trigger endpoints of the watchdogs driving these endpoints: their last reading
    times say whether each is silent (``watchdog_holds``)."""
    return {
        w.trigger_endpoint_id for w in rules.watchdogs_on(endpoint_ids) if w.trigger_endpoint_id
    }


def watchdog_holds(
    rules: RuleSet, endpoint_ids: Iterable[int], readings: dict[int, Reading], *, now: datetime
) -> dict[int, WatchdogHold]:
    """Endpoint id → the highest-priority watchdog holding it at ``now``: one that drives it
    and whose trigger endpoint (its reading in ``readings``) has been silent for its N
    seconds; an endpoint never heard from arms no watchdog."""
    ids = set(endpoint_ids)
    held: dict[int, WatchdogHold] = {}
    for watchdog in rules.watchdogs_on(ids):
        reading = readings.get(watchdog.trigger_endpoint_id or 0)
        seconds = silence_seconds(watchdog.threshold_value)
        if not seconds or reading is None or reading.at is None:
            continue
        if now - reading.at < timedelta(seconds=seconds):
            continue
        hold = WatchdogHold(watchdog.pk, watchdog.priority)
        driven = {
            watchdog.target_endpoint_id,
            *(a.target_endpoint_id for a in watchdog.actions.all()),
        }
        for endpoint in driven & ids:
            if endpoint not in held or hold.priority > held[endpoint].priority:
                held[endpoint] = hold
    return held
