"""Structured logs in every process: one JSON object per line (or a readable console line),
whether the call went through structlog or plain ``logging`` (ours, Celery's, Django's).

docs/spec.md §9 keys (eventId, ruleId, commandIntentId, …) reach a line two ways: passed as
``extra={...}`` on a stdlib call, or bound in structlog's context variables for the length
of a Celery task (taskName, taskId) or of one MQTT message in the bridge (serialNumber).
"""

from __future__ import annotations

import logging
import logging.config
import sys
from collections.abc import Mapping
from contextvars import Token
from typing import Any

import structlog
from structlog.typing import Processor

from config.env import SettingError, credentials_masked, env_str

LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# The correlation keys docs/spec.md §9 asks every line to carry when they apply.
TRACE_KEYS = (
    "eventId",
    "ruleId",
    "ruleExecutionId",
    "commandIntentId",
    "deviceCommandId",
    "deviceId",
    "serialNumber",
)


def log_format_from_env(*, debug: bool) -> str:
    """``LOG_FORMAT``: ``json`` (production default) or ``console`` (default with DEBUG)."""
    raw = env_str("LOG_FORMAT", "console" if debug else "json")
    if raw.lower() not in LOG_FORMATS:
        raise SettingError("LOG_FORMAT", raw, "expected json or console")
    return raw.lower()


def log_level_from_env() -> str:
    """``LOG_LEVEL`` (default WARNING keeps tests and idle processes quiet)."""
    raw = env_str("LOG_LEVEL", "WARNING")
    if raw.upper() not in LOG_LEVELS:
        raise SettingError("LOG_LEVEL", raw, f"expected one of {', '.join(LOG_LEVELS)}")
    return raw.upper()


def _shared_processors() -> list[Processor]:
    """Steps both structlog calls and stdlib records go through, so both look alike."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
    ]


def _renderer(fmt: str) -> list[Processor]:
    if fmt == "console":
        return [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()), _line_masked]
    return [structlog.processors.format_exc_info, structlog.processors.JSONRenderer(), _line_masked]


def _line_masked(logger: Any, method_name: str, line: Any) -> Any:
    """The rendered line with every URL password masked, whatever logged it (an exception's
    message, a library's connection error): no line shows a settings credential."""
    return credentials_masked(line) if isinstance(line, str) else line


def logging_settings(*, fmt: str, level: str) -> dict[str, Any]:
    """Django's ``LOGGING``: one stderr handler whose formatter renders every record."""
    formatter = {
        "()": structlog.stdlib.ProcessorFormatter,
        # stdlib records: context variables first, then ``extra=`` keys (they win).
        "foreign_pre_chain": [*_shared_processors(), structlog.stdlib.ExtraAdder()],
        "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_renderer(fmt)],
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structured": formatter},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's defaults print these with their own plain handlers: route them here.
            "django": {"handlers": [], "level": level, "propagate": True},
            "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }


def configure(logging_config: dict[str, Any]) -> None:
    """``LOGGING_CONFIG`` hook (Django) and Celery's ``setup_logging``: structlog's own calls
    end in the same stdlib handler, so there is one format per process."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    logging.config.dictConfig(logging_config)


# --- Celery task context ---------------------------------------------------------------
_task_tokens: dict[str, Mapping[str, Token[Any]]] = {}


def task_context_bind(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    """``task_prerun``: every line the task logs names it, in any pool (threads included)."""
    if task_id is None:
        return
    name = getattr(task, "name", None)
    _task_tokens[task_id] = structlog.contextvars.bind_contextvars(taskName=name, taskId=task_id)


def task_context_unbind(task_id: str | None = None, **_: Any) -> None:
    """``task_postrun``: restore what was bound before (an eager task runs inside a caller)."""
    tokens = _task_tokens.pop(task_id or "", None)
    if tokens is None:
        return
    try:
        structlog.contextvars.reset_contextvars(**tokens)
    except ValueError:  # token from another context: at least drop this task's keys
        structlog.contextvars.unbind_contextvars("taskName", "taskId")


def celery_setup_logging(**_: Any) -> None:
    """Celery's ``setup_logging``: a receiver stops Celery installing its own handlers."""
    from django.conf import settings

    configure(settings.LOGGING)
