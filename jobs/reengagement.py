"""Worked example of another team's scheduled job built only on the service's Python API.

Every day, mail the users who crossed ``days`` of inactivity in the last day. Add it to the site's
beat schedule, e.g. ``CELERY_BEAT_SCHEDULE = {"mail-dormant": every("activity.example.mail_dormant", 86400)}``
(``every`` from ``activity.schedule``).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail

from activity.services import history, locks

SUBJECT = "We miss you"
BODY = "Hello {name}, it has been {days} days since your last visit. Here is what is new: ..."


@shared_task(name="activity.example.mail_dormant", acks_late=True)
def mail_dormant(days: int = 30, page_size: int = 500) -> dict[str, Any]:
    """Mail users who have been away ``days`` days; one query for their addresses per page."""
    if not 1 <= days <= 3650 or not 1 <= page_size <= 5000:
        raise ValueError("days must be 1..3650 and page_size 1..5000")
    sent = 0
    with locks.exclusive_job("mail-dormant") as acquired:
        if not acquired:
            return {"job": "mail-dormant", "ran": False}
        for page in history.dormant_users(days=days, window=1, page_size=page_size):
            ids = [user.account_id for user in page if user.account_id is not None]
            accounts = get_user_model().objects.filter(pk__in=ids, is_active=True).exclude(email="")
            messages = [
                (SUBJECT, BODY.format(name=account.get_username(), days=days), None, [account.email])
                for account in accounts
            ]
            sent += send_mass_mail(messages, fail_silently=False)
    return {"job": "mail-dormant", "ran": True, "sent": sent}
