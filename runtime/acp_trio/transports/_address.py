"""What a failure to reach a URL's host and port was, for messages that say what to do.

Contract: :func:`where` is the ``host:port`` of a URL (``[::1]:8765`` for IPv6; the scheme's default
port; ``host`` alone when the port is malformed, ``ValueError`` for it with ``strict``);
:func:`connect_failure` says whether an exception from opening a TCP connection (trio's, or an HTTP
client's wrapping it) was every address refusing (``"refused"``), the host not found
(``"unknown-host"``, with the resolver's words) or something else (``None``).  Used by
``connect_http`` and by the checker's ``--url``; each words its own advice.
"""

from __future__ import annotations

import socket
import urllib.parse

_SECURE = ("https", "wss")


def where(url: str, *, strict: bool = False) -> tuple[str, str]:
    """``(host, "host:port")`` of ``url``; raises ``ValueError`` for a malformed port when ``strict``."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme in _SECURE else 80)
    except ValueError:
        if strict:
            raise
        return host, host
    return host, (f"{host}:{port}" if ":" not in host else f"[{host}]:{port}")


def root_causes(exc: BaseException) -> list[BaseException]:
    """The last exception of ``exc``'s chain of causes (``__cause__``, else ``__context__``), or the
    leaves of that exception group (trio raises one ``OSError`` per address tried, grouped)."""
    seen: set[int] = set()
    last = exc
    while id(last) not in seen and not isinstance(last, BaseExceptionGroup):
        seen.add(id(last))
        following = last.__cause__ or last.__context__
        if following is None:
            break
        last = following
    if not isinstance(last, BaseExceptionGroup):
        return [last]
    leaves: list[BaseException] = []
    groups = [last]
    while groups:
        for inner in groups.pop().exceptions:
            if isinstance(inner, BaseExceptionGroup):
                groups.append(inner)
            else:
                leaves.append(inner)
    return leaves


def connect_failure(exc: BaseException) -> tuple[str | None, str]:
    """``("refused", "")`` when every address refused the connection, ``("unknown-host", why)`` when the
    host name did not resolve, else ``(None, "")``."""
    causes = root_causes(exc)
    if causes and all(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return "refused", ""
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            return "unknown-host", str(cause.strerror or cause)
    return None, ""
