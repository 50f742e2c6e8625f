"""Activity tracking: last seen, online users, navigation sessions and reports, kept in Redis."""

__version__ = "0.1.0"
