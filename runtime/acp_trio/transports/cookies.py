"""Cookies for the remote transports: what a server sets, sent back on later requests to it.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` ("Requires cookie support on
HTTP transports"): clients MUST accept, store and return cookies the server sets, on Streamable
HTTP and on WebSocket, for the duration of the connection, so a load balancer can keep a client on
one backend (affinity) across its requests and across reconnects; clients MAY discard them when the
connection ends.

Contract: :class:`CookieStore` keeps ``name → value`` from ``Set-Cookie`` headers, as the TypeScript
SDK's ``MemoryAcpCookieStore`` does (attributes such as ``Path`` and ``Domain`` are not
interpreted: the store belongs to one server's endpoint), except that a cookie set with
``Max-Age`` of zero or less is removed.  A transport given no store uses a fresh one per connection;
pass the same store to each reconnect to keep the affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _pairs(header: str) -> Iterable[tuple[str, str]]:
    for part in header.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            yield name.strip(), value.strip()


class CookieStore:
    """Cookies set by one ACP server, for the ``Cookie`` header of later requests to it."""

    def __init__(self) -> None:
        self._cookies: dict[str, str] = {}
        self.version = 0
        """Changes each time the stored cookies change: a transport caching headers built with
        :meth:`apply` rebuilds them when it differs from the version they were built at."""

    def store(self, headers: Iterable[tuple[bytes | str, bytes | str]]) -> None:
        """Keep the cookies of the ``Set-Cookie`` headers among ``headers`` (name/value pairs, as
        bytes, ISO-8859-1, or str)."""
        for name, value in headers:
            # raw bytes are compared as they are: most answers set no cookie, and decode nothing
            if (name.lower() != b"set-cookie") if isinstance(name, bytes) else (name.lower() != "set-cookie"):
                continue
            first, *attributes = _text(value).split(";")
            cookie, sep, cookie_value = first.partition("=")
            cookie = cookie.strip()
            if not sep or not cookie:
                continue
            expired = any(
                key.strip().lower() == "max-age" and val.strip().lstrip("-").isdigit() and int(val.strip()) <= 0
                for key, _, val in (attribute.partition("=") for attribute in attributes)
            )
            if expired:
                if self._cookies.pop(cookie, None) is not None:
                    self.version += 1
            elif self._cookies.get(cookie) != (kept := cookie_value.strip()):
                self._cookies[cookie] = kept
                self.version += 1

    def header(self, caller: str | None = None) -> str | None:
        """The ``Cookie`` header value: the stored cookies, then ``caller``'s own (which win), or ``None``."""
        merged = dict(self._cookies)
        merged.update(_pairs(caller or ""))
        return "; ".join(f"{name}={value}" for name, value in merged.items()) or None

    def apply(self, headers: Mapping[str, str]) -> dict[str, str]:
        """A copy of ``headers`` with the ``Cookie`` header merged from the store and ``headers``' own."""
        out = {name: value for name, value in headers.items() if name.lower() != "cookie"}
        caller = next((value for name, value in headers.items() if name.lower() == "cookie"), None)
        cookie = self.header(caller)
        if cookie is not None:
            out["Cookie"] = cookie
        return out

    def clear(self) -> None:
        """Forget every cookie."""
        self._cookies.clear()
        self.version += 1

    def __len__(self) -> int:
        return len(self._cookies)


__all__ = ["CookieStore"]
