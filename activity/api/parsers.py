"""JSON parsing that lets the serializers name the field holding NaN or Infinity."""

from rest_framework.parsers import JSONParser


class EventJSONParser(JSONParser):
    """DRF's JSON parser, accepting the NaN/Infinity literals Python's json module emits.

    DRF's strict mode rejects the whole body with a bare "JSON parse error"; accepting them here
    lets ``ts`` validation answer "events.3.ts: Must be a finite number." instead.
    """

    strict = False
