"""Activity tracking: last seen, online users, navigation sessions and reports, kept in Redis."""
