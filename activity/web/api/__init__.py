"""The REST API (v1): thin DRF views over activity.services."""
