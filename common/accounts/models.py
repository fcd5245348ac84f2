"""The API token table: a digest of each key, never the key."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A user's API credential (one per user: issuing again rotates it). ``prefix`` is the
    key's first characters, not secret, so a presented key finds its row without a scan;
    ``digest`` is the SHA-256 of the whole key, so a copy of the table authenticates nobody."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    prefix = models.CharField(max_length=8)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        # In Meta rather than ``db_index``/``unique`` on the fields: those add a pattern-ops
        # copy of each index for LIKE, and a key is only ever compared whole.
        constraints = [models.UniqueConstraint(fields=["digest"], name="api_token_digest_once")]
        indexes = [models.Index(fields=["prefix"], name="api_token_prefix_idx")]

    def __str__(self) -> str:
        return f"{self.prefix}… (user:{self.user_id})"
