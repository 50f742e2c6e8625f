"""The app's permissions: one named Django permission per kind of access, needed alike by an API
operation and its admin counterpart (docs/api.md has the table). They belong to ``UserActivity``
(its ``Meta.permissions``). ``is_staff`` alone grants none of them; it only opens the admin's door.
A superuser has them all, through Django's ``has_perm``."""

from __future__ import annotations

VIEW_ACTIVITY = "activity.view_activity"
EXPORT_ACTIVITY = "activity.export_activity"
ERASE_ACTIVITY = "activity.erase_activity"
INGEST_EVENTS = "activity.ingest_events"
RUN_JOBS = "activity.run_jobs"
DEFINE_FUNNELS = "activity.define_funnels"

# (codename, name), as ``UserActivity.Meta.permissions`` declares them.
DECLARED = [
    ("view_activity", "Can view everyone's activity: API reads, stats, reports, metrics, the dashboard"),
    ("export_activity", "Can export any user's activity"),
    ("erase_activity", "Can erase any user's activity everywhere"),
    ("ingest_events", "Can send activity events to the ingest API"),
    ("run_jobs", "Can queue activity jobs (flush, report rebuild) from the dashboard"),
    ("define_funnels", "Can define and delete funnels"),
]
