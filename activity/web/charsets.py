"""The charsets a request may declare. Django takes any codec Python knows as a request's encoding,
then raises while decoding with one that is not a text encoding (rot13, hex, base64): in building
the request when it has a query string, before any middleware, so the server's front refuses them
(``project/asgi.py``), and the API's JSON parser too, for sites that serve it otherwise."""

from __future__ import annotations

import codecs
import functools

# Bytes a query string or form body may hold; a usable charset decodes them with errors="replace"
# and leaves this ASCII text as it is.
_ANY_BYTES = bytes(range(256))
_ASCII_TEXT = "a=1&next=/admin/x.y-z_~%20+"


@functools.lru_cache(maxsize=64)
def usable_charset(charset: str) -> bool:
    """Whether Django can decode a request declaring ``charset``: one Python does not know (Django
    ignores it and reads UTF-8), or a text encoding (not rot13, hex or base64) that decodes any bytes
    with errors="replace" (idna cannot) and is ASCII-compatible, as URLs and form bodies are (not
    UTF-16, UTF-7 or punycode)."""
    try:
        codecs.lookup(charset)
    except LookupError:
        return True
    try:
        _ANY_BYTES.decode(charset, "replace")
        return _ASCII_TEXT.encode(charset) == _ASCII_TEXT.encode("ascii")
    except (LookupError, ValueError):
        return False
