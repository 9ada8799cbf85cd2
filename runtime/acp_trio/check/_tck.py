"""Which requirements of acp-tck, the protocol's official test kit, our checks cover.

acp-tck (github.com/agentclientprotocol/acp-tck) names each rule it tests with a stable id,
``ACP-<AREA>-<NNN>``, one registry per protocol version (``src/tck/v1/requirements.py``,
``src/tck/v2/requirements.py``); in protocol 2 an id numbered ``2xx`` is a rule new or changed in
that version, and an id kept from protocol 1 is the same rule.  :data:`REQUIREMENTS` maps each of
our check names (``python -m acp_trio.check``'s, agent mode) to the ids of the rules it checks the
same way, per protocol version; the report shows them next to the check name (text), as
``requirements`` (``--json``) and as a ``requirements`` property (``--junit``).  A check that
covers no acp-tck rule (``initialize.before``, ``jsonrpc.cancel-request``, ``lifecycle.stderr``,
...) has no entry, and acp-tck rules no check covers (authentication, ``_meta``, batches, ...) are
simply not named.

Where acp-tck only records what it sees (its ``ACP-INFO-*`` rows, such as a malformed line's
answer), our check asserts one answer (-32700): the id still names the same probe.

:data:`TCK_IDS` lists every id of the two registries, read at the commits of :data:`TCK_SOURCES`
(ids only: acp-tck's own wording stays there); a test checks that every id of the table is one of
them.  To follow a newer acp-tck, read its registries again, update both, and the commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

TCK_SOURCES: Final[Mapping[int, tuple[str, str, str]]] = MappingProxyType(
    {
        # v1 was read from the repository acp-tck was developed in before it moved to the
        # agentclientprotocol organisation, whose README (183ee5a) names the same two registries
        1: ("EugeneTheDev/acp-tck", "199755295e746b8d000bd3208af1280a2fbabf75", "src/tck/v1/requirements.py"),
        2: ("agentclientprotocol/acp-tck", "1314e0951863b03844fd530e0e14bd88843aabe7", "src/tck/v2/requirements.py"),
    }
)
"""Per protocol version: the repository, commit and file :data:`TCK_IDS` was read from."""


def _ids(text: str) -> frozenset[str]:
    return frozenset(text.split())


TCK_IDS: Final[Mapping[int, frozenset[str]]] = MappingProxyType(
    {
        1: _ids(
            """
            ACP-TRANSPORT-001 ACP-TRANSPORT-002
            ACP-JSONRPC-001 ACP-JSONRPC-002 ACP-JSONRPC-003 ACP-JSONRPC-004 ACP-JSONRPC-005
            ACP-INIT-001 ACP-INIT-002 ACP-INIT-003 ACP-INIT-004
            ACP-SCHEMA-001 ACP-SCHEMA-002
            ACP-SESSION-001 ACP-SESSION-002
            ACP-PROMPT-001 ACP-PROMPT-002 ACP-PROMPT-003
            ACP-CANCEL-001 ACP-CANCEL-002
            ACP-LOAD-001 ACP-LOAD-002 ACP-LOAD-003
            ACP-RESUME-001 ACP-RESUME-002
            ACP-LIST-001 ACP-LIST-002
            ACP-DELETE-001 ACP-DELETE-002
            ACP-CLOSE-001 ACP-CLOSE-002
            ACP-ADDDIRS-001
            ACP-MODES-001 ACP-MODES-002
            ACP-CONFIG-001 ACP-CONFIG-002 ACP-CONFIG-003
            ACP-PROMPTCAP-001 ACP-PROMPTCAP-002 ACP-PROMPTCAP-003
            ACP-AUTH-001 ACP-AUTH-002 ACP-AUTH-003 ACP-AUTH-004 ACP-AUTH-005
            ACP-CLIENTCAP-001 ACP-CLIENTCAP-002 ACP-CLIENTCAP-003
            ACP-EXT-001 ACP-META-001 ACP-ERROR-001 ACP-SHUTDOWN-001 ACP-STDERR-001
            ACP-INFO-PARSE-001 ACP-INFO-INVALIDREQ-001 ACP-INFO-UNKNOWNSESSION-001
            """
        ),
        2: _ids(
            """
            ACP-INIT-001 ACP-INIT-003 ACP-INIT-201 ACP-INIT-202 ACP-INIT-203 ACP-INIT-204
            ACP-SCHEMA-001 ACP-SCHEMA-002
            ACP-SESSION-001 ACP-SESSION-002 ACP-SESSION-203
            ACP-PROMPT-003 ACP-PROMPT-201 ACP-PROMPT-203 ACP-PROMPT-205
            ACP-STATE-201 ACP-STATE-202 ACP-STATE-203
            ACP-PROMPTCAP-001 ACP-PROMPTCAP-002 ACP-PROMPTCAP-003
            ACP-PERM-201 ACP-CLIENTCAP-201 ACP-CLIENTCAP-202
            ACP-CANCEL-201 ACP-CANCEL-202 ACP-CANCEL-203 ACP-CANCEL-204
            ACP-CANCEL-205 ACP-CANCEL-206 ACP-CANCEL-207 ACP-CANCEL-208
            ACP-TRANSPORT-002 ACP-TRANSPORT-201 ACP-TRANSPORT-203
            ACP-JSONRPC-001 ACP-JSONRPC-002 ACP-JSONRPC-003 ACP-JSONRPC-004 ACP-JSONRPC-005
            ACP-BATCH-201 ACP-BATCH-202 ACP-BATCH-203 ACP-BATCH-204
            ACP-BATCH-205 ACP-BATCH-206 ACP-BATCH-207 ACP-BATCH-208
            ACP-RESUME-201 ACP-RESUME-202 ACP-RESUME-203 ACP-RESUME-204 ACP-RESUME-205
            ACP-LIST-201 ACP-LIST-202 ACP-LIST-203 ACP-LIST-204
            ACP-CLOSE-201 ACP-CLOSE-202
            ACP-DELETE-201 ACP-DELETE-202 ACP-DELETE-203
            ACP-ADDDIRS-201 ACP-ADDDIRS-202
            ACP-MCP-201 ACP-MCP-202
            ACP-CONFIG-201 ACP-CONFIG-202 ACP-CONFIG-203 ACP-CONFIG-204 ACP-CONFIG-206
            ACP-AUTH-201 ACP-AUTH-202 ACP-AUTH-203 ACP-AUTH-204 ACP-AUTH-205 ACP-AUTH-206 ACP-AUTH-207
            ACP-PATCH-201 ACP-PATCH-203 ACP-PATCH-204 ACP-PATCH-205
            ACP-PATCH-206 ACP-PATCH-207 ACP-PATCH-208 ACP-PATCH-209
            ACP-ENUM-201 ACP-ENUM-202 ACP-ENUM-203
            ACP-EXT-001 ACP-EXT-201 ACP-EXT-202 ACP-EXT-203
            ACP-META-001 ACP-META-201 ACP-ERROR-001 ACP-SHUTDOWN-001 ACP-STDERR-001
            ACP-INFO-CONCURRENT-201 ACP-INFO-UNKNOWNSESSION-001 ACP-INFO-CANCEL-201 ACP-INFO-CANCEL-202
            ACP-INFO-BATCH-201 ACP-INFO-BATCH-202 ACP-INFO-PARSE-001 ACP-INFO-INVALIDREQ-001
            """
        ),
    }
)
"""Per protocol version: every requirement id acp-tck's registry declares (at :data:`TCK_SOURCES`)."""

SUMMARIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        # our own one-line summaries of the rules the table names (not acp-tck's text)
        "ACP-TRANSPORT-001": "each stdout line is one JSON-RPC message",
        "ACP-TRANSPORT-203": "messages are newline-delimited, with no newline inside one",
        "ACP-TRANSPORT-002": "stdout is UTF-8",
        "ACP-JSONRPC-001": "a response carries its request's id exactly",
        "ACP-JSONRPC-003": "notifications get no response",
        "ACP-JSONRPC-004": "an unknown method gets -32601 (a SHOULD)",
        "ACP-EXT-001": "a request for a _-prefixed method gets a response",
        "ACP-EXT-201": "a _-prefixed notification gets no response",
        "ACP-INIT-001": "initialize succeeds with an integer protocolVersion",
        "ACP-INIT-002": "asked for version 1, the agent answers 1",
        "ACP-INIT-201": "the version answered is the one asked, else the agent's latest",
        "ACP-INIT-003": "an unsupported version asked gets the agent's own, not an echo",
        "ACP-INIT-004": "agentInfo names the agent (a SHOULD)",
        "ACP-INIT-203": "info names the agent (required in protocol 2)",
        "ACP-AUTH-001": "authMethods ids are unique",
        "ACP-AUTH-201": "authMethods methodIds are unique (v1's id, renamed)",
        "ACP-TRANSPORT-201": "a line on stdio may hold a JSON-RPC batch array",
        "ACP-SCHEMA-001": "what the agent sends validates against the schema",
        "ACP-SESSION-001": "session/new answers a session id",
        "ACP-PROMPT-001": "a text prompt ends with a defined stop reason",
        "ACP-PROMPT-002": "a turn's updates name the prompted session",
        "ACP-PROMPT-205": "a turn's updates name the prompted session",
        "ACP-STATE-201": "a turn reports running before its idle",
        "ACP-PROMPT-003": "a prompt with a resource_link is accepted",
        "ACP-PROMPTCAP-001": "an image block is accepted when advertised",
        "ACP-PROMPTCAP-002": "an audio block is accepted when advertised",
        "ACP-PROMPTCAP-003": "an embedded resource is accepted when advertised",
        "ACP-CANCEL-001": "session/cancel ends the turn cancelled, not with an error",
        "ACP-CANCEL-201": "session/cancel ends the turn idle with stopReason cancelled",
        "ACP-CANCEL-203": "a cancelled turn is not reported as an error",
        "ACP-CANCEL-208": "session/close of a busy session cancels its turn",
        "ACP-CLOSE-002": "session/close of a busy session cancels its turn",
        "ACP-CLOSE-202": "session/close of a busy session cancels its turn",
        "ACP-LOAD-001": "session/load of a known session succeeds",
        "ACP-LOAD-002": "session/load replays before it answers, not after",
        "ACP-RESUME-202": "session/resume from the start replays before it answers",
        "ACP-RESUME-001": "session/resume of a known session succeeds",
        "ACP-RESUME-201": "session/resume of a known session succeeds",
        "ACP-RESUME-002": "session/resume replays no history before it answers",
        "ACP-RESUME-203": "session/resume without replayFrom replays no history",
        "ACP-LIST-001": "session/list answers a sessions array",
        "ACP-LIST-201": "session/list answers a sessions array",
        "ACP-LIST-203": "session/list filtered by cwd lists only that cwd",
        "ACP-DELETE-001": "session/delete of a known session succeeds",
        "ACP-DELETE-201": "session/delete of a known session succeeds",
        "ACP-DELETE-002": "deleting an unknown session succeeds silently (a SHOULD)",
        "ACP-DELETE-203": "deleting an unknown session succeeds silently (a SHOULD)",
        "ACP-MODES-002": "session/set_mode to another listed mode succeeds",
        "ACP-CONFIG-002": "session/set_config_option answers every option",
        "ACP-CONFIG-202": "session/set_config_option answers every option",
        "ACP-MCP-201": "session/new takes a stdio MCP server when advertised",
        "ACP-MCP-202": "session/new takes an http MCP server when advertised",
        "ACP-CLIENTCAP-001": "no fs/* request without the client's fs capability",
        "ACP-CLIENTCAP-002": "no terminal/* request without the client's terminal capability",
        "ACP-SHUTDOWN-001": "the agent exits once its stdin closes",
        "ACP-INFO-PARSE-001": "a malformed JSON line (acp-tck records the answer; we expect -32700)",
        "ACP-INFO-INVALIDREQ-001": "JSON that is no request (acp-tck records the answer; we expect -32600)",
    }
)
"""Our one-line summary of each requirement id :data:`REQUIREMENTS` names."""

REQUIREMENTS: Final[Mapping[str, Mapping[int, tuple[str, ...]]]] = MappingProxyType(
    {
        # check name: {protocol version: acp-tck ids of the rules it checks}
        "initialize.version": {1: ("ACP-INIT-001", "ACP-INIT-002"), 2: ("ACP-INIT-001", "ACP-INIT-201")},
        "initialize.newer-version": {1: ("ACP-INIT-003",), 2: ("ACP-INIT-003",)},
        "initialize.info": {1: ("ACP-INIT-004",), 2: ("ACP-INIT-203",)},
        "initialize.capabilities": {1: ("ACP-AUTH-001",), 2: ("ACP-AUTH-201",)},
        "jsonrpc.parse-error": {1: ("ACP-INFO-PARSE-001",), 2: ("ACP-INFO-PARSE-001",)},
        "jsonrpc.invalid-request": {1: ("ACP-INFO-INVALIDREQ-001",), 2: ("ACP-INFO-INVALIDREQ-001",)},
        "jsonrpc.unknown-method": {1: ("ACP-JSONRPC-004", "ACP-EXT-001"), 2: ("ACP-JSONRPC-004", "ACP-EXT-001")},
        "jsonrpc.notifications": {1: ("ACP-JSONRPC-003",), 2: ("ACP-JSONRPC-003", "ACP-EXT-201")},
        "jsonrpc.ids": {1: ("ACP-JSONRPC-001",), 2: ("ACP-JSONRPC-001",)},
        "session.new": {1: ("ACP-SESSION-001",), 2: ("ACP-SESSION-001",)},
        "session.prompt": {1: ("ACP-PROMPT-001", "ACP-PROMPT-002"), 2: ("ACP-PROMPT-205", "ACP-STATE-201")},
        "session.cancel": {1: ("ACP-CANCEL-001",), 2: ("ACP-CANCEL-201", "ACP-CANCEL-203")},
        "session.content-types": {
            1: ("ACP-PROMPT-003", "ACP-PROMPTCAP-001", "ACP-PROMPTCAP-002", "ACP-PROMPTCAP-003"),
            2: ("ACP-PROMPT-003", "ACP-PROMPTCAP-001", "ACP-PROMPTCAP-002", "ACP-PROMPTCAP-003"),
        },
        "session.load": {1: ("ACP-LOAD-001", "ACP-LOAD-002"), 2: ("ACP-RESUME-202",)},
        "session.mcp": {2: ("ACP-MCP-201", "ACP-MCP-202")},
        "session.list": {1: ("ACP-LIST-001",), 2: ("ACP-LIST-201", "ACP-LIST-203")},
        "session.resume": {1: ("ACP-RESUME-001", "ACP-RESUME-002"), 2: ("ACP-RESUME-201", "ACP-RESUME-203")},
        "session.close": {1: ("ACP-CLOSE-002",), 2: ("ACP-CLOSE-202", "ACP-CANCEL-208")},
        "session.delete": {1: ("ACP-DELETE-001", "ACP-DELETE-002"), 2: ("ACP-DELETE-201", "ACP-DELETE-203")},
        "session.set-mode": {1: ("ACP-MODES-002",)},
        "session.set-config-option": {1: ("ACP-CONFIG-002",), 2: ("ACP-CONFIG-202",)},
        "lifecycle.eof": {1: ("ACP-SHUTDOWN-001",), 2: ("ACP-SHUTDOWN-001",)},
        "stdout.jsonrpc": {
            1: ("ACP-TRANSPORT-001", "ACP-TRANSPORT-002"),
            2: ("ACP-TRANSPORT-002", "ACP-TRANSPORT-201", "ACP-TRANSPORT-203"),
        },
        "schema.valid": {1: ("ACP-SCHEMA-001",), 2: ("ACP-SCHEMA-001",)},
        "capabilities.client": {1: ("ACP-CLIENTCAP-001", "ACP-CLIENTCAP-002")},
    }
)
"""Our check name → protocol version → the acp-tck requirement ids it covers (see the module docstring)."""


def requirements_of(check: str, protocol: int) -> tuple[str, ...]:
    """The acp-tck requirement ids the check ``check`` covers in ``protocol`` (``()`` for none)."""
    return REQUIREMENTS.get(check, {}).get(protocol, ())
