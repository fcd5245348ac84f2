"""What a reminder is about: a document with an expiry date, or an endpoint's metric."""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from common.validators import (
    validate_date_bounds,
)
from devices.models import Device, DeviceInstanceEndpoint, Farm
from reminders.models.choices import (
    METRIC_WINDOW_MAX_MINUTES,
    DocumentSubject,
    DocumentType,
    MetricAggregate,
)


class Document(models.Model):
    """A dated document with an expiry: the ``document`` reminder source."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="documents")
    subject_kind = models.CharField(max_length=16, choices=DocumentSubject.choices)
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="documents"
    )
    worker_name = models.CharField(max_length=200, blank=True, default="")
    document_type = models.CharField(max_length=40, choices=DocumentType.choices)
    title = models.CharField(max_length=200)
    # The farm's calendar; None: never.
    expires_on = models.DateField(null=True, blank=True, validators=[validate_date_bounds])
    active = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=0)  # +1 per write: the event key
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # Reconciliation: changed since the watermark, in cursor order.
            models.Index(fields=["updated_at", "id"], name="document_changed_idx"),
            # Reconciliation: expiries whose occurrences fall in the due window.
            models.Index(fields=["farm", "expires_on"], name="document_expiry_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(subject_kind=DocumentSubject.DEVICE) | Q(device__isnull=False),
                name="document_device_subject_has_device",
            ),
            models.CheckConstraint(
                condition=~Q(subject_kind=DocumentSubject.WORKER) | ~Q(worker_name=""),
                name="document_worker_subject_has_name",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class EndpointMetricSource(models.Model):
    """A metric over one endpoint's recent values: the ``endpoint_metric`` reminder source.
    ``metric_key`` names it (e.g. ``silo_level``); settings select sources by it."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="metric_sources")
    endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="metric_sources"
    )
    metric_key = models.SlugField(max_length=60, db_index=False)  # indexed in Meta
    aggregate = models.CharField(max_length=8, choices=MetricAggregate.choices)
    window_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(METRIC_WINDOW_MAX_MINUTES)],
    )
    active = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=0)  # +1 per write: the event key
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["updated_at", "id"], name="metric_source_changed_idx"),
            # Settings select sources by equality; a plain index (a SlugField's own index
            # would add a pattern-ops copy for LIKE that nothing runs).
            models.Index(fields=["metric_key"], name="metric_source_key_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.metric_key}@{self.endpoint_id}"
