"""Webhook URLs are checked by notifications.destinations when saved (a validator: nothing
changes in the database), and ``destination_forbidden`` joins the notification reasons."""

import notifications.destinations
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0004_webhook_secrets_derived_not_stored'),
    ]

    operations = [
        migrations.AlterField(
            model_name='externalcontact',
            name='webhook_url',
            field=models.URLField(blank=True, default='', max_length=500, validators=[notifications.destinations.validate_webhook_url]),
        ),
        migrations.AlterField(
            model_name='notification',
            name='status_reason',
            field=models.CharField(choices=[('queued', 'Queued'), ('claimed', 'Claimed'), ('delivered', 'Delivered'), ('opted_out', 'Opted Out'), ('channel_disabled', 'Channel Disabled'), ('no_address', 'No Address'), ('channel_unsupported', 'Channel Unsupported'), ('recipient_gone', 'Recipient Gone'), ('template_missing', 'Template Missing'), ('template_variable_missing', 'Template Variable Missing'), ('template_error', 'Template Error'), ('transient_error', 'Transient Error'), ('permanent_error', 'Permanent Error'), ('destination_forbidden', 'Destination Forbidden'), ('retry_budget_exhausted', 'Retry Budget Exhausted'), ('lease_expired', 'Lease Expired'), ('support_retry', 'Support Retry'), ('support_cancelled', 'Support Cancelled')], default='queued', max_length=32),
        ),
        migrations.AlterField(
            model_name='notificationtransition',
            name='reason',
            field=models.CharField(choices=[('queued', 'Queued'), ('claimed', 'Claimed'), ('delivered', 'Delivered'), ('opted_out', 'Opted Out'), ('channel_disabled', 'Channel Disabled'), ('no_address', 'No Address'), ('channel_unsupported', 'Channel Unsupported'), ('recipient_gone', 'Recipient Gone'), ('template_missing', 'Template Missing'), ('template_variable_missing', 'Template Variable Missing'), ('template_error', 'Template Error'), ('transient_error', 'Transient Error'), ('permanent_error', 'Permanent Error'), ('destination_forbidden', 'Destination Forbidden'), ('retry_budget_exhausted', 'Retry Budget Exhausted'), ('lease_expired', 'Lease Expired'), ('support_retry', 'Support Retry'), ('support_cancelled', 'Support Cancelled')], max_length=32),
        ),
    ]
