"""Transcripts of the wire (NDJSON, both directions): recording, and the player that replays one side.

File format (one JSON object per line, UTF-8, in the order the recording side saw the messages)::

    {"dir": "client->agent", "message": {"jsonrpc": "2.0", "id": 0, "method": "initialize", ...}}
    {"dir": "agent->client", "message": {"jsonrpc": "2.0", "id": 0, "result": {...}}}

``dir`` is ``"client->agent"`` or ``"agent->client"``; ``message`` is the JSON-RPC message as it
was on the wire (a line that was not JSON is kept as ``{"dir": ..., "raw": "<the line>"}``).
Blank lines are ignored.  Integers keep their exact value (stdlib ``json``, no float rounding).
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias, overload

import trio

Direction: TypeAlias = Literal["client->agent", "agent->client"]
"""Which way a message went."""

Side: TypeAlias = Literal["client", "agent"]

Normalizer: TypeAlias = Callable[[Any], Any]
"""``normalize(message) -> message``: applied to every recorded and every observed message before
they are compared (return a copy with the fields that legitimately vary removed or replaced; it
must not change its argument).  ``message`` is the JSON value of one message."""

DEFAULT_BIND: tuple[str, ...] = ("sessionId", "messageId", "toolCallId", "terminalId")
"""Keys whose values are names one side makes up and the other side repeats (generated session,
message, tool call and terminal ids).  In a replay they are *bound*, not compared: the first time a
recorded value meets an observed one they are paired, and from then on the observed value must stand
for that recorded value (and only it); values the player sends are translated through the pairs.
JSON-RPC ``id`` s of the peer's requests are bound the same way."""

CLIENT_TO_AGENT: Direction = "client->agent"
"""The ``dir`` of a message the client sent."""
AGENT_TO_CLIENT: Direction = "agent->client"
"""The ``dir`` of a message the agent sent."""
_DIRECTIONS: tuple[Direction, ...] = (CLIENT_TO_AGENT, AGENT_TO_CLIENT)


@dataclass(frozen=True)
class Entry:
    """One message of a :class:`Transcript`: ``direction`` and ``message`` (its JSON value), or
    ``raw`` (the line's text) for a line that was not JSON (then ``message`` is ``None``)."""

    direction: Direction
    message: Any
    raw: str | None = None

    @property
    def method(self) -> str | None:
        """The message's ``method`` (requests and notifications), else ``None``."""
        m = self.message.get("method") if isinstance(self.message, dict) else None
        return m if isinstance(m, str) else None

    def label(self) -> str:
        """A short description: ``client->agent request session/prompt (id 2)``, ``... response (id 2)``."""
        return f"{self.direction} {_describe(self.message) if self.raw is None else 'non-JSON line'}"

    def as_json(self) -> dict[str, Any]:
        """The entry as one line of the file format (a dict)."""
        if self.raw is not None:
            return {"dir": self.direction, "raw": self.raw}
        return {"dir": self.direction, "message": self.message}


def _describe(message: Any) -> str:
    if not isinstance(message, dict):
        return f"batch of {len(message)}" if isinstance(message, list) else "non-object message"
    method = message.get("method")
    if isinstance(method, str):
        if "id" in message:
            return f"request {method} (id {message['id']!r})"
        update = message.get("params", {}).get("update") if isinstance(message.get("params"), dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        return f"notification {method}" + (f" ({kind})" if isinstance(kind, str) else "")
    if "error" in message:
        return f"error response (id {message.get('id')!r})"
    return f"response (id {message.get('id')!r})"


class Transcript(Sequence[Entry]):
    """The messages of one connection, both directions, in order (a sequence of :class:`Entry`).

    Build one by recording (:func:`record`, :meth:`tap`, or ``pair(...).transcript``), from a file
    (:meth:`load`), from NDJSON text (:meth:`loads`) or from entries.  Save with :meth:`save` /
    :meth:`dumps`.  The file format is described in the module docstring of
    :mod:`acp_trio.testing` (``{"dir": "client->agent", "message": {...}}`` per line).
    """

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.entries: list[Entry] = list(entries)

    # -- Sequence --------------------------------------------------------------------------------
    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> Transcript: ...
    def __getitem__(self, index: int | slice) -> Entry | Transcript:
        if isinstance(index, slice):
            return Transcript(self.entries[index])
        return self.entries[index]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __repr__(self) -> str:
        return f"<Transcript of {len(self.entries)} messages>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Transcript) and self.entries == other.entries

    __hash__ = None  # type: ignore[assignment]

    # -- views -----------------------------------------------------------------------------------
    def messages(self, direction: Direction | None = None) -> list[Any]:
        """The JSON messages going ``direction`` (both when ``None``), in order."""
        return [e.message for e in self.entries if direction is None or e.direction == direction]

    def methods(self, direction: Direction | None = None) -> list[str]:
        """The methods of the requests and notifications going ``direction``, in order
        (``["initialize", "session/new", ...]``)."""
        return [m for e in self.entries if (direction is None or e.direction == direction) and (m := e.method)]

    def lines(self) -> list[str]:
        """:meth:`Entry.label` of every entry (for readable assertions and failure messages)."""
        return [e.label() for e in self.entries]

    # -- recording -------------------------------------------------------------------------------
    def add(self, direction: Direction, line: bytes | str) -> None:
        """Append one wire line (``bytes`` or ``str``, with or without its newline) going ``direction``."""
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be 'client->agent' or 'agent->client', got {direction!r}")
        text = line.decode("utf-8", "replace") if isinstance(line, bytes | bytearray) else line
        text = text.rstrip("\r\n")
        try:
            message = json.loads(text)
        except ValueError:
            self.entries.append(Entry(direction, None, text))
            return
        self.entries.append(Entry(direction, message))

    def tap(self, side: Side) -> Callable[[Literal["in", "out"], bytes], None]:
        """A ``tap`` (:data:`acp_trio.Tap`) for a connection of ``side`` (``"client"`` or
        ``"agent"``) that appends every message to this transcript: give it to
        ``spawn_agent(..., tap=transcript.tap("client"))``, ``run_agent_stdio``, a connection, ...
        Raises ``ValueError`` for another side."""
        if side not in ("client", "agent"):
            raise ValueError(f"side must be 'client' or 'agent', got {side!r}")
        out: Direction = CLIENT_TO_AGENT if side == "client" else AGENT_TO_CLIENT
        inward: Direction = AGENT_TO_CLIENT if side == "client" else CLIENT_TO_AGENT

        def tap(direction: Literal["in", "out"], line: bytes) -> None:
            self.add(out if direction == "out" else inward, line)

        return tap

    # -- files -----------------------------------------------------------------------------------
    def dumps(self) -> str:
        """The NDJSON text: one line per entry, each ending in ``\\n``."""
        return "".join(json.dumps(e.as_json(), ensure_ascii=False, separators=(",", ":")) + "\n" for e in self)

    @classmethod
    def loads(cls, text: str, *, source: str = "<string>") -> Transcript:
        """Parse NDJSON text (see the format).  Raises ``ValueError`` naming ``source`` and the line
        number for a line that is not a JSON object with a valid ``dir`` and ``message`` (or ``raw``)."""
        entries: list[Entry] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{source}:{number}"
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{where}: not JSON ({exc}); each line is one {{'dir', 'message'}} object") from None
            if not isinstance(item, dict) or item.get("dir") not in _DIRECTIONS:
                raise ValueError(f"{where}: expected an object with 'dir' 'client->agent' or 'agent->client'")
            if "message" in item:
                entries.append(Entry(item["dir"], item["message"]))
            elif isinstance(item.get("raw"), str):
                entries.append(Entry(item["dir"], None, item["raw"]))
            else:
                raise ValueError(f"{where}: the entry has no 'message' (nor a 'raw' string)")
        return cls(entries)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`dumps` to ``path`` (UTF-8, replacing it)."""
        Path(path).write_text(self.dumps(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Transcript:
        """Read a transcript file; raises ``OSError`` and the ``ValueError`` of :meth:`loads`."""
        return cls.loads(Path(path).read_text(encoding="utf-8"), source=str(path))


@contextmanager
def record(conn: Any, transcript: Transcript | None = None) -> Iterator[Transcript]:
    """Record the wire of a running connection while the block runs: ``with record(conn) as t:``.

    ``conn``: an :class:`~acp_trio.AgentSideConnection` or :class:`~acp_trio.ClientSideConnection`
    (the direction of each message follows from its ``side``).  Messages are appended to
    ``transcript`` (a new :class:`Transcript` by default), which is yielded.  A tap the connection
    already has keeps being called.  Raises ``TypeError`` for anything but those connections.
    To record from the very first message, pass ``tap=transcript.tap("client")`` when the connection
    is made instead (``spawn_agent``, ``open_memory_pair``; :func:`~acp_trio.testing.pair` always records).
    """
    side = getattr(conn, "side", None)
    connection = getattr(conn, "connection", None)
    if side not in ("client", "agent") or connection is None:
        raise TypeError(f"record() takes an AgentSideConnection or ClientSideConnection, got {conn!r}")
    transcript = Transcript() if transcript is None else transcript
    ours = transcript.tap(side)
    before = connection.tap

    def both(direction: Literal["in", "out"], line: bytes) -> None:
        ours(direction, line)
        if before is not None:
            before(direction, line)

    connection.tap = both
    try:
        yield transcript
    finally:
        connection.tap = before


# -- comparison ----------------------------------------------------------------------------------


@dataclass
class Divergence:
    """Where a replay (or a :class:`~acp_trio.testing.FakeAgent`) stopped matching its transcript.

    ``index``: the 0-based position of the recorded message that was not matched; ``expected``:
    that :class:`Entry` (``None`` when the implementation sent a message the transcript does not
    have); ``actual``: the message observed instead (``None`` when nothing came within the
    timeout or the stream ended); ``reason``: one line; ``diff``: a unified diff, recorded (``-``)
    against observed (``+``), of the two messages as indented JSON (after normalisation and id
    binding); ``previous``: the labels of the up to three entries before it.  ``str()`` is the
    whole readable report.
    """

    index: int
    total: int
    expected: Entry | None
    actual: Any
    reason: str
    diff: str = ""
    previous: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"replay diverged at message {self.index + 1} of {self.total}: {self.reason}"
        lines = [head]
        if self.previous:
            lines.append("after:")
            lines.extend(f"  {label}" for label in self.previous)
        if self.diff:
            lines.append(self.diff.rstrip("\n"))
        return "\n".join(lines)


def _pretty(value: Any) -> list[str]:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").splitlines(keepends=True)


def unified_diff(expected: Any, actual: Any, *, expected_name: str = "recorded", actual_name: str = "observed") -> str:
    """A unified diff of two JSON values rendered as indented, key-sorted JSON (``-`` expected,
    ``+`` actual); ``""`` when they are equal."""
    return "".join(difflib.unified_diff(_pretty(expected), _pretty(actual), expected_name, actual_name, n=3))


class _Bindings:
    """Pairs of recorded and observed values of the bound keys (see :data:`DEFAULT_BIND`)."""

    def __init__(self, keys: Collection[str]) -> None:
        self.keys = frozenset(keys)
        self.forward: dict[str, dict[Any, Any]] = {}  # key -> recorded -> observed
        self.reverse: dict[str, dict[Any, Any]] = {}  # key -> observed -> recorded

    def copy(self) -> _Bindings:
        """A copy to try a match on (committed only when the message matches)."""
        other = _Bindings(self.keys)
        other.forward = {key: dict(pairs) for key, pairs in self.forward.items()}
        other.reverse = {key: dict(pairs) for key, pairs in self.reverse.items()}
        return other

    def observed_as_recorded(self, key: str, observed: Any, recorded: Any) -> Any:
        """The recorded value ``observed`` stands for; binds it to ``recorded`` when both are new."""
        reverse = self.reverse.setdefault(key, {})
        forward = self.forward.setdefault(key, {})
        if _hashable(observed) in reverse:
            return reverse[_hashable(observed)]
        if _bindable(recorded) and _bindable(observed) and _hashable(recorded) not in forward:
            forward[_hashable(recorded)] = observed
            reverse[_hashable(observed)] = recorded
            return recorded
        return observed

    def translate_out(self, value: Any, key: str | None = None) -> Any:
        """``value`` (recorded, about to be sent) with bound values replaced by their observed pairs."""
        if isinstance(value, dict):
            return {k: self.translate_out(v, k if k in self.keys else None) for k, v in value.items()}
        if isinstance(value, list):
            return [self.translate_out(v, key) for v in value]
        if key is not None and _bindable(value):
            return self.forward.get(key, {}).get(_hashable(value), value)
        return value

    def translate_in(self, observed: Any, recorded: Any, key: str | None = None) -> Any:
        """``observed`` with bound values replaced by the recorded values they stand for (binding new
        pairs where ``recorded`` has a value at the same place)."""
        if isinstance(observed, dict):
            rec = recorded if isinstance(recorded, dict) else {}
            return {k: self.translate_in(v, rec.get(k), k if k in self.keys else None) for k, v in observed.items()}
        if isinstance(observed, list):
            rec_list = recorded if isinstance(recorded, list) else []
            return [
                self.translate_in(v, rec_list[i] if i < len(rec_list) else None, key) for i, v in enumerate(observed)
            ]
        if key is not None and _bindable(observed):
            return self.observed_as_recorded(key, observed, recorded)
        return observed


def _bindable(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _hashable(value: Any) -> Any:
    return (type(value).__name__, value)


def _is_request(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message


def _is_response(message: Any) -> bool:
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


# -- the player ----------------------------------------------------------------------------------


class _Player:
    """Plays one side of a transcript over a pair of byte streams and checks the other side's messages.

    ``plays``: the side whose recorded messages are sent (``"client"`` for a replay against an
    agent, ``"agent"`` for :class:`FakeAgent`).  A recorded message of the played side is sent once
    every message recorded before it was received (translated through the bindings); each message
    of the other side is read (within ``timeout`` seconds), normalised, translated and compared.
    The first difference ends the play with a :class:`Divergence`.
    """

    def __init__(
        self,
        transcript: Transcript,
        plays: Side,
        *,
        normalize: Normalizer | None,
        bind: Collection[str],
        timeout: float,
    ) -> None:
        if plays not in ("client", "agent"):
            raise ValueError(f"plays must be 'client' or 'agent', got {plays!r}")
        if not (timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.transcript = transcript
        self.plays = plays
        self.sends: Direction = CLIENT_TO_AGENT if plays == "client" else AGENT_TO_CLIENT
        self.normalize = normalize
        self.bindings = _Bindings(bind)
        self.rpc_ids = _Bindings(())  # the peer's request ids: recorded <-> observed
        self.timeout = timeout
        self.observed = Transcript()
        """Every message sent and received during the play (as a transcript)."""
        self.divergence: Divergence | None = None
        self.position = 0
        """How many recorded messages were played or matched."""
        self._buffer = bytearray()

    def _norm(self, message: Any) -> Any:
        if self.normalize is None:
            return message
        return self.normalize(json.loads(json.dumps(message)))  # a copy: the hook may not mutate ours

    def _diverge(self, index: int, actual: Any, reason: str, *, diff: bool = True) -> Divergence:
        expected = self.transcript[index] if index < len(self.transcript) else None
        text = ""
        if diff and expected is not None and actual is not None:
            text = unified_diff(self._norm(expected.message), actual)
        elif diff and expected is not None:
            text = "".join("-" + line for line in _pretty(self._norm(expected.message)))
        elif diff and actual is not None:
            text = "".join("+" + line for line in _pretty(actual))
        previous = [e.label() for e in self.transcript.entries[max(0, index - 3) : index]]
        self.divergence = Divergence(index, len(self.transcript), expected, actual, reason, text, previous)
        return self.divergence

    async def _read_message(self, receive: trio.abc.ReceiveStream) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if line.strip():
                    return line
                continue
            chunk = await receive.receive_some(65536)
            if not chunk:
                if self._buffer.strip():
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._buffer += chunk

    def _outgoing(self, entry: Entry) -> bytes:
        if entry.raw is not None:
            return entry.raw.encode("utf-8") + b"\n"
        message = self.bindings.translate_out(entry.message)
        if _is_response(message) and isinstance(message, dict):  # an answer to the peer's request: its id
            recorded_id = entry.message.get("id")
            message["id"] = self.rpc_ids.forward.get("id", {}).get(_hashable(recorded_id), recorded_id)
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"

    def _try(self, expected: Entry, observed: Any) -> tuple[bool, Any, _Bindings, _Bindings]:
        """Compare ``observed`` (parsed, or the text of a non-JSON line) with ``expected`` on copies of
        the bindings; returns (same, observed as compared, the bindings, the rpc id bindings)."""
        bindings, rpc_ids = self.bindings.copy(), self.rpc_ids.copy()
        if isinstance(observed, str) or expected.raw is not None:
            return expected.raw == observed, observed, bindings, rpc_ids
        recorded = self._norm(expected.message)
        observed = self._norm(observed)
        if _is_request(observed) and isinstance(recorded, dict):
            rpc_id = rpc_ids.observed_as_recorded("id", observed["id"], recorded.get("id"))
            observed = {**bindings.translate_in(observed, recorded), "id": rpc_id}
        else:
            observed = bindings.translate_in(observed, recorded)
        return observed == recorded, observed, bindings, rpc_ids

    @staticmethod
    def _stream(message: Any) -> Any:
        """Messages of one stream keep their recorded order: the ``session/update`` s of a session."""
        if isinstance(message, dict) and message.get("method") == "session/update":
            params = message.get("params")
            return ("update", params.get("sessionId") if isinstance(params, dict) else None)
        return None

    def _match_in_window(self, window: list[int], line: bytes) -> tuple[int | None, Any]:
        """The index (in the transcript) of the entry of ``window`` that ``line`` is, committing its
        bindings and removing it from ``window``; else ``None`` and ``line`` as compared with the
        first entry of the window."""
        try:
            observed: Any = json.loads(line)
        except ValueError:
            observed = line.decode("utf-8", "replace")
        entries = self.transcript.entries
        blocked: set[Any] = set()
        first: Any = None
        for position, index in enumerate(window):
            expected = entries[index]
            stream = self._stream(expected.message)
            if stream is not None and stream in blocked:
                continue
            same, compared, bindings, rpc_ids = self._try(expected, observed)
            if position == 0:
                first = compared
            if same:
                self.bindings, self.rpc_ids = bindings, rpc_ids
                del window[position]
                return index, compared
            if stream is not None:
                blocked.add(stream)
        return None, first

    async def _send(self, send: trio.abc.SendStream, index: int) -> Divergence | None:
        entry = self.transcript.entries[index]
        data = self._outgoing(entry)
        self.observed.add(self.sends, data)
        try:
            await send.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return self._diverge(index, None, f"could not send {entry.label()}: the peer closed its input")
        return None

    async def play(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> Divergence | None:
        """Play the whole transcript, then check the peer sends nothing more.  Returns the
        :class:`Divergence`, or ``None`` when everything matched.

        A run of consecutive recorded messages of the peer is a *window*: its messages may arrive in
        any order (trio runs concurrent tasks in no fixed order), except that the ``session/update``
        notifications of one session keep their recorded order.  After the last message a replay
        closes ``send`` and gives the agent ``timeout`` seconds to send nothing more and close; a
        FakeAgent waits for the client to close.
        """
        entries = self.transcript.entries
        index = 0
        while index < len(entries):
            self.position = index
            if entries[index].direction == self.sends:
                failed = await self._send(send, index)
                if failed is not None:
                    return failed
                index += 1
                continue
            window = []
            while index < len(entries) and entries[index].direction != self.sends:
                window.append(index)
                index += 1
            while window:
                self.position = window[0]
                expected = entries[window[0]]
                with trio.move_on_after(self.timeout):
                    line = await self._read_message(receive)
                    if line is None:
                        return self._diverge(
                            window[0], None, f"expected {expected.label()}, but the peer's output ended"
                        )
                    self.observed.add(expected.direction, line)
                    matched, compared = self._match_in_window(window, line)
                    if matched is None:
                        return self._diverge(
                            window[0], compared, f"expected {expected.label()}, observed something else"
                        )
                    continue
                return self._diverge(
                    window[0], None, f"expected {expected.label()}, but nothing came within {self.timeout:g} s"
                )
        self.position = len(entries)
        # a replay closes the agent's input and gives it `timeout` to stop; a FakeAgent stays until
        # the client closes (the end of the test's block)
        with trio.move_on_after(self.timeout if self.plays == "client" else math.inf):
            if self.plays == "client":
                await send.aclose()
            line = await self._read_message(receive)
            if line is not None:
                self.observed.add(AGENT_TO_CLIENT if self.plays == "client" else CLIENT_TO_AGENT, line)
                try:
                    extra: Any = self._norm(json.loads(line))
                except ValueError:
                    extra = line.decode("utf-8", "replace")
                peer = "agent" if self.plays == "client" else "client"
                return self._diverge(
                    len(entries), extra, f"the transcript ended, but the {peer} sent more: {_describe(extra)}"
                )
        return None


@dataclass
class ReplayResult:
    """What :func:`replay` observed: ``divergence`` (``None``: the implementation matched the whole
    transcript), ``observed`` (every message sent and received, a :class:`Transcript`), ``matched``
    (how many recorded messages were played or matched before the end or the divergence)."""

    divergence: Divergence | None
    observed: Transcript
    matched: int

    @property
    def ok(self) -> bool:
        """Whether the replay matched the whole transcript."""
        return self.divergence is None


def _transcript_of(transcript: Transcript | str | os.PathLike[str]) -> Transcript:
    if isinstance(transcript, Transcript):
        return transcript
    if isinstance(transcript, str | os.PathLike):
        return Transcript.load(transcript)
    raise TypeError(f"expected a Transcript or the path of a transcript file, got {transcript!r}")


def _agent_mapping(agent: Any, protocol: int | None, transcript: Transcript) -> Any:
    """``agent`` as for AgentSideConnection, for the protocol the transcript's initialize asks."""
    from ._pair import _picks_versions, variant_of_protocol

    if isinstance(agent, Mapping) or _picks_versions(agent):
        return agent  # a version-neutral agent answers the version the transcript's initialize asks
    if protocol is None:
        protocol = 1
        for entry in transcript:
            if entry.direction == CLIENT_TO_AGENT and entry.method == "initialize":
                asked = entry.message.get("params", {}).get("protocolVersion")
                protocol = asked if asked in (1, 2) else 1
                break
    return {variant_of_protocol(protocol): agent}


async def replay(
    transcript: Transcript | str | os.PathLike[str],
    agent: Any,
    *,
    protocol: int | None = None,
    normalize: Normalizer | None = None,
    bind: Collection[str] = DEFAULT_BIND,
    timeout: float = 5.0,
    **options: Any,
) -> ReplayResult:
    """Replay the client side of ``transcript`` against ``agent`` in memory and compare what it sends.

    ``transcript``: a :class:`Transcript` or the path of a transcript file.  ``agent``: an agent
    object or factory, or a ``{variant: agent}`` mapping, as for
    :class:`~acp_trio.AgentSideConnection` (``options``, e.g. ``eof_grace``, are for it); a plain
    agent serves the ``protocol`` given, else the one the transcript's ``initialize`` asks for (1
    when it has none).  Each recorded client message is sent once every message recorded before it
    was received; each recorded agent message is compared with the next one the agent sends, after
    ``normalize`` (see :data:`Normalizer`) and id binding (``bind``: see :data:`DEFAULT_BIND`).
    After the last message the agent's input is closed and it must send nothing more.  The
    transcript must start where the connection did (with ``initialize``: a new connection refuses
    anything before it), as :func:`~acp_trio.testing.pair` and ``tap=`` record them.
    ``timeout``: seconds to wait for each agent message.  Returns a :class:`ReplayResult`; never
    raises for a divergence (see :func:`assert_replays`).  Raises ``TypeError``/``ValueError`` for
    bad arguments and what ``Transcript.load`` raises.
    """
    from trio.testing import memory_stream_one_way_pair

    from .._roles import AgentSideConnection

    script = _transcript_of(transcript)
    player = _Player(script, "client", normalize=normalize, bind=bind, timeout=timeout)
    to_agent, agent_input = memory_stream_one_way_pair()
    agent_output, from_agent = memory_stream_one_way_pair()
    agent_conn = AgentSideConnection(_agent_mapping(agent, protocol, script), agent_output, agent_input, **options)

    async def end_output_when_closed() -> None:
        # a process would exit once its input ended; a connection object closes: end its output too
        await agent_conn.wait_closed()
        await agent_output.aclose()

    async with agent_conn, trio.open_nursery() as nursery:
        nursery.start_soon(end_output_when_closed)
        divergence = await player.play(to_agent, from_agent)
        await to_agent.aclose()
        await agent_conn.aclose()
        await from_agent.aclose()
    return ReplayResult(divergence, player.observed, player.position)


async def assert_replays(
    transcript: Transcript | str | os.PathLike[str],
    agent: Any,
    **kwargs: Any,
) -> ReplayResult:
    """:func:`replay`, then ``AssertionError`` with the :class:`Divergence` report (the first divergent
    message, the messages before it and a unified diff) when the agent did not match; returns the
    :class:`ReplayResult` otherwise.  Arguments as for :func:`replay`."""
    result = await replay(transcript, agent, **kwargs)
    if result.divergence is not None:
        raise AssertionError(str(result.divergence))
    return result


class FakeAgent:
    """An agent that plays back the agent side of a recorded :class:`Transcript` to a client under test.

    ``transcript``: a :class:`Transcript` or a file path.  Serve it with
    :func:`~acp_trio.testing.pair` (``async with pair(FakeAgent(t), client=MyClient) as p``) or on
    any byte streams with :meth:`serve`.  Each recorded agent message is sent once every message
    recorded before it arrived; each message the client sends is compared with the recorded one
    after ``normalize`` and id binding (``bind``: :data:`DEFAULT_BIND`; the client's request ids
    are bound too, so a client that numbers its requests differently still matches).  On the first
    difference (or ``timeout`` seconds without the expected client message) it stops, closes its
    end (the client sees :class:`~acp_trio.ConnectionClosed`) and keeps the :class:`Divergence` in
    :attr:`divergence`; :func:`~acp_trio.testing.pair` then raises ``AssertionError`` with it.
    One ``FakeAgent`` plays once; make a new one for each connection.
    """

    def __init__(
        self,
        transcript: Transcript | str | os.PathLike[str],
        *,
        normalize: Normalizer | None = None,
        bind: Collection[str] = DEFAULT_BIND,
        timeout: float = 5.0,
    ) -> None:
        self.transcript = _transcript_of(transcript)
        self._player = _Player(self.transcript, "agent", normalize=normalize, bind=bind, timeout=timeout)
        self.done = trio.Event()
        """Set once the play ended (matched to the end, or diverged)."""
        self._started = False

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> FakeAgent:
        """A :class:`FakeAgent` playing the transcript file ``path`` (``options`` as for the constructor)."""
        return cls(Transcript.load(path), **options)

    @property
    def divergence(self) -> Divergence | None:
        """The first difference from the transcript, or ``None`` (so far)."""
        return self._player.divergence

    @property
    def observed(self) -> Transcript:
        """Every message sent and received so far."""
        return self._player.observed

    @property
    def protocol_version(self) -> int:
        """The protocol version the recorded ``initialize`` answer names (1 when there is none)."""
        for entry in self.transcript:
            if entry.direction == AGENT_TO_CLIENT and isinstance(entry.message, dict):
                result = entry.message.get("result")
                if isinstance(result, dict) and result.get("protocolVersion") in (1, 2):
                    version: int = result["protocolVersion"]
                    return version
        return 1

    @property
    def started(self) -> bool:
        """Whether this fake has started playing (it plays once)."""
        return self._started

    def _claim(self) -> None:
        if self._started:
            raise RuntimeError("this FakeAgent already played its transcript; make a new one per connection")
        self._started = True

    async def serve(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> Divergence | None:
        """Play the transcript over ``send``/``receive`` (the client's input and output), then close
        ``send``.  Returns the :class:`Divergence` or ``None``.  Raises ``RuntimeError`` when this
        fake already played."""
        self._claim()
        return await self._serve(send, receive)

    async def _serve(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> Divergence | None:
        try:
            return await self._player.play(send, receive)
        finally:
            with trio.CancelScope(shield=True):
                await send.aclose()
            self.done.set()

    def assert_played(self) -> None:
        """``AssertionError`` with the :class:`Divergence` report when the client diverged, or naming
        the next recorded message when the play has not reached the end of the transcript."""
        if self.divergence is not None:
            raise AssertionError(str(self.divergence))
        if not self.done.is_set():
            left = len(self.transcript) - self._player.position
            nxt = self.transcript[self._player.position].label() if left else "the end of input"
            raise AssertionError(f"the FakeAgent's transcript was not played to the end: {left} left, next {nxt}")


__all__ = [
    "AGENT_TO_CLIENT",
    "CLIENT_TO_AGENT",
    "DEFAULT_BIND",
    "Direction",
    "Divergence",
    "Entry",
    "FakeAgent",
    "Normalizer",
    "ReplayResult",
    "Transcript",
    "assert_replays",
    "record",
    "replay",
    "unified_diff",
]
