"""A history's source: a SQLite path or a ``postgresql://`` URL, its secrets kept out of
what is printed (:func:`redact`, :func:`scrub`), and what can be checked of it before a session
runs (:func:`check_url`, :func:`check_target`)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .errors import EXTRA_HINT, HistoryError, MissingExtra

__all__ = ["URL_SCHEMES", "check_target", "check_url", "import_psycopg", "is_url", "redact",
           "scrub", "secrets_of"]

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(source: str) -> bool:
    return source.startswith(URL_SCHEMES)


# libpq's connection parameters that hold a secret or name a file of secrets; any other key
# with one of these words in it is taken for one too (a URL's query is printed without them)
_SECRET_KEYS = ("password", "sslpassword", "passfile", "sslkey", "sslcert", "sslkeylogfile")
_SECRET_WORDS = ("pass", "secret", "token", "key")


def _secret_key(key: str) -> bool:
    key = unquote(key).strip().lower()
    return key in _SECRET_KEYS or any(word in key for word in _SECRET_WORDS)


def _split_url(source: str) -> tuple[str, str, str, str, str, str]:
    """``scheme://userinfo@hosts/path?query#fragment`` as its six parts, without decoding
    or checking anything (so that a malformed URL can still be shown redacted)."""
    scheme, _, rest = source.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    return scheme, userinfo, hosts, slash + path, query, fragment


def secrets_of(source: str) -> list[str]:
    """The secrets a URL holds: its password and the values of secret query parameters
    (as written and percent-decoded)."""
    if not is_url(source):
        return []
    _, userinfo, _, _, query, _ = _split_url(source)
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    found += [value for key, _, value in (p.partition("=") for p in query.split("&"))
              if _secret_key(key)]
    return sorted({v for raw in found if raw for v in (raw, unquote(raw))}, key=len, reverse=True)


def redact(source: str) -> str:
    """The source as it may be printed or stored: a URL's password and the values of its
    secret query parameters (``password=``, ``sslpassword=``, ``passfile=``...) as ``***``.
    Never raises, also for a malformed URL."""
    if not is_url(source):
        return source
    scheme, userinfo, hosts, path, query, fragment = _split_url(source)
    if ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    params = [(key, eq, "***" if eq and _secret_key(key) else value)
              for key, eq, value in (p.partition("=") for p in query.split("&"))] if query else []
    text = f"{scheme}://{userinfo + '@' if userinfo else ''}{hosts}{path}"
    text += "?" + "&".join(k + eq + v for k, eq, v in params) if query else ""
    return text + (f"#{fragment}" if fragment else "")


def scrub(text: str, source: str) -> str:
    """``text`` (a driver's message) without any secret of ``source`` in it."""
    for secret in secrets_of(source):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
        else:  # a short secret only as a word of its own: "e" must not mangle the message
            text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
    return text


def check_url(source: str) -> None:
    """A ``postgresql://`` URL's hosts and ports, checked before a session runs (libpq's own
    error would come only at its end): every port a number in 1-65535, an IPv6 address in
    brackets and well formed. Several ``host:port`` may be given, comma-separated."""
    label = redact(source)
    hosts = _split_url(source)[2]
    for hostport in unquote(hosts).split(","):
        host, port = hostport, ""
        if hostport.startswith("["):
            host, bracket, port = hostport[1:].partition("]")
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                bracket = ""
            if not bracket or (port and not port.startswith(":")):
                raise HistoryError(f"{label}: malformed IPv6 host {hostport!r} (expected "
                                   "[address] or [address]:port)")
            port = port[1:]
        elif "[" in hostport or "]" in hostport:
            raise HistoryError(f"{label}: malformed IPv6 host {hostport!r} (expected [address] or "
                               "[address]:port)")
        elif hostport.count(":") > 1:
            raise HistoryError(f"{label}: malformed host {hostport!r} (an IPv6 address goes in "
                               "brackets: [address]:port)")
        else:
            host, _, port = hostport.partition(":")
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise HistoryError(f"{label}: port {port!r} of host {host!r} is not a number in "
                               "1-65535")


def import_psycopg(label: str) -> Any:
    """The psycopg 3 module, or :class:`MissingExtra` naming the extra that brings it."""
    try:
        import psycopg
    except ImportError:
        raise MissingExtra(f"{label}: a PostgreSQL history needs psycopg 3 "
                           f"({EXTRA_HINT})") from None
    return psycopg


def check_target(source: str) -> None:
    """What can be known before a session runs: the scheme, the driver, the file's directory."""
    if "://" in source and not is_url(source):
        raise HistoryError(f"{redact(source)}: expected a path (SQLite) or a postgresql:// URL, "
                           f"got scheme {source.split('://', 1)[0]!r}")
    if is_url(source):
        check_url(source)
        import_psycopg(redact(source))
        return
    path = Path(source)
    if path.is_dir():
        raise HistoryError(f"{source}: is a directory, expected a SQLite file")
    if not path.parent.is_dir():
        raise HistoryError(f"{source}: directory {path.parent} does not exist")

