"""The app's admin pages, registered with the site's own admin: the flushed rows (``rows``), the
funnels (``funnels``) and the activity dashboard (``dashboard``, its figures and charts in
``figures`` and ``charts``)."""

from activity.admin import dashboard, funnels, rows

__all__ = ["dashboard", "funnels", "rows"]
