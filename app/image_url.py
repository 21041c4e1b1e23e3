"""InsertMedia image URLs: strict parsing and credentials split off (the host policy: fleetfish.image_policy).

The URL is fetched later by CDI's importer (Go), not by Python: anything two URL parsers could
read differently (backslashes, spaces, control or non-ASCII characters in the authority, bad
ports, unbalanced IPv6 brackets) is refused here rather than guessed at.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from fleetfish.image_policy import host_allowed

__all__ = ["ImageURL", "host_allowed", "parse", "redact"]

SCHEMES = ("http", "https")
# RFC 3986 characters only (no space, backslash, quote, angle bracket, control or non-ASCII).
_URL_CHARS = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$")
# A DNS name in ASCII (IDN hosts must be given as punycode).
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?$"
)


@dataclass(frozen=True)
class ImageURL:
    """A checked image URL: ``url`` has no user info; credentials from it are kept apart."""

    url: str
    host: str
    username: str = ""
    password: str = ""


def parse(image: str) -> ImageURL | None:
    """The checked URL, or None when it is not an absolute http(s) URL with a sane host."""
    if not image or len(image) > 4096 or not _URL_CHARS.match(image):
        return None
    try:
        parts = urlsplit(image)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        return None
    host = parts.hostname or ""
    if parts.scheme.lower() not in SCHEMES or not host:
        return None
    if not (_is_ip(host) or _HOSTNAME.match(host)):
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    url = urlunsplit((parts.scheme.lower(), netloc, parts.path, parts.query, parts.fragment))
    return ImageURL(
        url=url,
        host=host,
        username=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
    )


def redact(url: str) -> str:
    """The URL without user:password@, for display and logs; never raises."""
    if not url or "@" not in url:
        return url
    checked = parse(url)
    if checked is not None:
        return checked.url
    # Not a URL we would accept: drop everything up to the last @ of the authority.
    scheme, sep, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    return f"{scheme}{sep}{authority.rsplit('@', 1)[-1]}{slash}{tail}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
