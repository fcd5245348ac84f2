"""Reminder sources, settings and report subscriptions (docs/spec.md §5).

Tables hold configuration and the identities keys are built from; the due work itself lives in
``automation.DueWork``. ``ReminderOccurrence`` links each scheduler row back to the
(setting, source) that wanted it, so "deactivate old rows first" finds them by source or
setting without scanning the scheduler table.

The models live in modules of their own, none of which imports this package; it only
re-exports them, so ``reminders.models.X`` stays each one's name (migrations use it).
"""

from __future__ import annotations

from reminders.models.choices import (
    METRIC_WINDOW_MAX_MINUTES as METRIC_WINDOW_MAX_MINUTES,
)
from reminders.models.choices import (
    OFFSET_DAYS_MAX as OFFSET_DAYS_MAX,
)
from reminders.models.choices import (
    OFFSETS_MAX as OFFSETS_MAX,
)
from reminders.models.choices import (
    DocumentSubject as DocumentSubject,
)
from reminders.models.choices import (
    DocumentType as DocumentType,
)
from reminders.models.choices import (
    FiringPolicyChoice as FiringPolicyChoice,
)
from reminders.models.choices import (
    MetricAggregate as MetricAggregate,
)
from reminders.models.choices import (
    RecipientsPolicy as RecipientsPolicy,
)
from reminders.models.choices import (
    Recurrence as Recurrence,
)
from reminders.models.choices import (
    ReminderTrigger as ReminderTrigger,
)
from reminders.models.choices import (
    SourceType as SourceType,
)
from reminders.models.choices import (
    ThresholdOperator as ThresholdOperator,
)
from reminders.models.choices import (
    offsets_days_problem as offsets_days_problem,
)
from reminders.models.choices import (
    validate_offsets_days as validate_offsets_days,
)
from reminders.models.reminder_settings import (
    ReminderOccurrence as ReminderOccurrence,
)
from reminders.models.reminder_settings import (
    ReminderSetting as ReminderSetting,
)
from reminders.models.reminder_settings import (
    ThresholdState as ThresholdState,
)
from reminders.models.reports import (
    ReconciliationWatermark as ReconciliationWatermark,
)
from reminders.models.reports import (
    ReportManualRun as ReportManualRun,
)
from reminders.models.reports import (
    ReportSubscription as ReportSubscription,
)
from reminders.models.sources import (
    Document as Document,
)
from reminders.models.sources import (
    EndpointMetricSource as EndpointMetricSource,
)
from reminders.models.user_messages import (
    UserMessage as UserMessage,
)
from reminders.models.user_messages import (
    UserMessageOccurrence as UserMessageOccurrence,
)
from reminders.models.user_messages import (
    UserMessageRecurrence as UserMessageRecurrence,
)
from reminders.models.user_messages import (
    UserMessageStatus as UserMessageStatus,
)
