"""The official TypeScript SDK's clients (``@agentclientprotocol/sdk`` 2.4.0) leaving a session host
mid-turn and coming back (issue 35, items 2-5).

Each client is a Node process running ``tests/interop/ts_host_client.mjs`` (the SDK's v1 entry point
or ``experimental/v2``, over its ``experimental/ws-client`` or ``experimental/http-client``); it
prints a JSON summary of what it saw, and the test asserts on it.  The agent is the demo agent
(``python -m acp_trio.demo --serve-agent``), whose turn streams a message, a plan and tool calls,
asks permission to read ``notes.txt``, runs a word count and writes ``summary.txt``.

- Behind ``python -m acp_trio.bridge --listen 127.0.0.1:0 --detach --token-file F`` (one bridge
  process for the module; an agent process per agent instance; two principals): a first client
  starts a turn and leaves after its first updates, without answering the permission request, by
  closing its stream (WebSocket close, HTTP ``DELETE``) or killed with SIGKILL; a second client
  process comes back over the other transport, v2 with ``session/resume`` (``replayFrom`` start,
  or the host's cursor ``{"type": "_acp_trio_from", "update": N}``), v1 with ``session/load``, with
  or without the first one's attach token, and gets every update exactly once, in order, the
  pending request (it answers it) and the turn's end (v2 the numbered ``state_update idle``; v1
  the host's ``_acp_trio/turn_ended``).  Before one v1 come-back, a client of the other
  principal's bearer token, with the session id and the attach token, cannot load the session
  (-32002).
- ``AcpApp(host=open_session_host(...), token={...})`` in this process: the same with a v2 client,
  which first tries two cursors the host refuses (-32602); and a client of another bearer token
  (another principal) that knows the session id and the attach token but cannot resume (-32002).
  Two v2 clients attached at once (item 3): the same numbered updates; the one that does not
  answer has its copy of the permission request withdrawn (``$/cancel_request``).

Node is spawned twice per test, so the module runs on one interpreter only.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from test_interop import INTEROP, TIME_LIMIT
from test_interop_websocket import ts_ws_sdk  # noqa: F401  (the session fixture: the SDK, zod and ws)

pytest.importorskip("hypercorn")
pytest.importorskip("trio_websocket")

from _processes import alive

from acp_trio.demo.agent import agents_for
from acp_trio.host import open_session_host
from acp_trio.transports.asgi import AcpApp, serve

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the bridge's agent processes: POSIX process groups"),
    pytest.mark.one_interpreter,  # Node processes; what the host does is tested in tests/test_host*.py
    pytest.mark.xdist_group("host-ts"),  # one worker (noxfile's --dist loadgroup): one bridge process
]

BECOME_DEMO = (
    "import os, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); "
    "os.execv(sys.executable, [sys.executable, '-m', 'acp_trio.demo', '--serve-agent'])"
)
"""The demo agent, after appending its pid to ``argv[1]`` (the same process: ``execv``)."""
TOKENS = {"t0k3n-alice": "alice", "t0k3n-bob": "bob"}
"""Each bearer token names a principal: ``AcpApp(host=..., token=TOKENS)``, the bridge's ``--token-file``."""
ALICE, BOB = TOKENS
RUN_BRIDGE = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('acp_trio.bridge', run_name='__main__', alter_sys=True)"
)
"""``python -m acp_trio.bridge ARGS``, stopped with SIGINT, which runs its shutdown (each agent's
ladder): Python leaves SIGINT ignored when its parent ignored it (a shell's background job)."""
DEADLINE = 2 * TIME_LIMIT
"""Seconds of real time per test: two Node processes (a guard against a hang)."""
DONE = "Done: summary.txt says 'notes.txt has 1 non-empty lines; the first is: one two three' "
"""The last sentence of the demo agent's turn, as its chunks join up."""


def started(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


class Bridge:
    """``python -m acp_trio.bridge --listen 127.0.0.1:0 --detach --token-file F -- <the demo agent>``
    running, ``F`` giving :data:`TOKENS`."""

    def __init__(self, workdir: Path) -> None:
        self.pids = workdir / "pids"
        self.lines: list[str] = []
        self.url = ""
        serving = threading.Event()
        tokens = workdir / "tokens"
        tokens.write_text("".join(f"{who} {token}\n" for token, who in TOKENS.items()), encoding="utf-8")
        tokens.chmod(0o600)
        command = [sys.executable, "-c", RUN_BRIDGE, "--listen", "127.0.0.1:0", "--detach", "--token-file", str(tokens)]
        command.append("--")
        self.process = subprocess.Popen(
            [*command, sys.executable, "-c", BECOME_DEMO, str(self.pids)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def drain() -> None:  # read the bridge's log to its end, so that it never blocks on a full pipe
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line)
                if line.startswith("bridge: serving") and not serving.is_set():
                    self.url = line.rsplit(" on ", 1)[1].strip()  # ws://127.0.0.1:PORT/acp
                    serving.set()
            serving.set()  # it exited

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not serving.wait(TIME_LIMIT) or not self.url:
            self.stop()
            pytest.fail(f"the bridge did not start listening:\n{''.join(self.lines)}", pytrace=False)

    def stop(self) -> None:
        """SIGINT, then its shutdown; SIGKILL after ``TIME_LIMIT`` seconds (and fail)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(TIME_LIMIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                pytest.fail(f"the bridge did not stop on SIGINT:\n{''.join(self.lines)}", pytrace=False)
        self.reader.join(TIME_LIMIT)
        left = [pid for pid in started(self.pids) if alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"agent processes outlived the bridge: {left}"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bridge]:
    running = Bridge(tmp_path_factory.mktemp("bridge"))
    try:
        yield running
    finally:
        running.stop()


def notes_dir(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one two three\n", encoding="utf-8")
    return str(work)


async def ts_client(npm_dir: Path, **config: Any) -> dict[str, Any]:
    """Run ``ts_host_client.mjs`` with ``config`` (its JSON argument); return its summary.  It exits 0,
    or (``leave="kill"``) is killed by its own SIGKILL."""
    name = "ts_host_client.mjs"
    proc = await trio.run_process(
        ["node", str(INTEROP / name), json.dumps(config)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "ACP_INTEROP_NPM_DIR": str(npm_dir)},
    )
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == (-signal.SIGKILL if config.get("leave") == "kill" else 0), (
        f"{name} {config} exited {proc.returncode}:\n{stderr}"
    )
    lines = proc.stdout.decode("utf-8").splitlines()
    assert lines, f"{name} {config} printed no summary:\n{stderr}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def numbered(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [u for u in summary["updates"] if u["n"] is not None]


def said(updates: list[dict[str, Any]]) -> str:
    return "".join(u["text"] for u in updates if u["kind"] == "agent_message_chunk" and u["text"] is not None)


def url_for(base: str, transport: str) -> str:
    """``base`` (``ws://`` or ``http://``) for ``transport``."""
    rest = base.split("://", 1)[1]
    return f"{'ws' if transport == 'ws' else 'http'}://{rest}"


def check_turn(first: dict[str, Any], second: dict[str, Any], version: int, *, replayed_all: bool) -> None:
    """The two clients' views of one turn: the first left before its end; the second came back,
    got the request the agent waited on, answered it and saw the end."""
    sid = first["sessionId"]
    mine, theirs = numbered(first), numbered(second)
    assert first["left"]["updates"] >= 3 and len(mine) >= 3
    assert [u["n"] for u in mine] == list(range(1, len(mine) + 1))  # the first client's: 1, 2, ... in order
    last = theirs[-1]["n"]
    if replayed_all:  # v2 replayFrom start, v1 session/load: the whole journal, then live
        assert [u["n"] for u in theirs] == list(range(1, last + 1))
        assert theirs[: len(mine)] == mine  # the replay is what the first client saw, as it saw it
        whole = theirs
    else:  # the cursor one past the first client's last number: the rest only
        whole = mine + theirs
        assert [u["n"] for u in whole] == list(range(1, last + 1))  # each once, in order
    text = said(whole)
    assert text.startswith("Let me read your notes and write a summary. ") and text.endswith(DONE)
    # the permission request the agent waited on goes to the client that came back, which answers it
    assert [(p["sessionId"], p["toolCallId"]) for p in second["permissions"]] == [(sid, "call_read")]
    assert all(p["toolCallId"] == "call_read" and not p["answered"] for p in first["permissions"])
    assert "attach" in second and "error" not in second["attach"], second.get("attach")
    if version == 2:
        end = whole[-1]  # the turn's end, numbered, with its stop reason
        assert (end["kind"], end["state"], end["stopReason"]) == ("state_update", "idle", "end_turn")
        current = [i for i, u in enumerate(second["updates"]) if u["current"]]
        # one current state_update, unnumbered: the turn waits on the user (or, if the agent had not
        # asked yet when the client came back, it runs); after the replay, before any live update
        assert [(second["updates"][i]["kind"], second["updates"][i]["state"]) for i in current] in (
            [("state_update", "requires_action")],
            [("state_update", "running")],
        )
        fence = second["attach"]["result"]["_meta"]["acp-trio/lastUpdate"]  # the last replayed number
        assert [u["n"] <= fence for u in second["updates"] if u["n"] is not None] == [
            i < current[0] for i, u in enumerate(second["updates"]) if u["n"] is not None
        ]
        assert first["prompt"]["messageId"]  # v2: the prompt was answered when accepted
    else:
        assert second["turnEnded"] == [{"sessionId": sid, "stopReason": "end_turn"}]
        assert second["attach"]["result"]["_meta"]["acp-trio/lastUpdate"] >= len(mine)


def check_stranger(stranger: dict[str, Any]) -> None:
    """A client of another principal's bearer token, with the session id and the first client's
    attach token, got nothing of the session (the guide's "Who may attach" and "Attach token")."""
    assert stranger["initialize"]["_meta"]["acp-trio/attached"] is False  # a new instance of its own
    assert stranger["attach"]["error"]["code"] == -32002  # as for a session that does not exist
    assert stranger["updates"] == [] and stranger["permissions"] == []


# -- the bridge's --detach (item 4) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "leave_over", "leave", "back_over", "replay", "token", "stranger"),
    [
        pytest.param(2, "ws", "close", "http", "cursor", True, False, id="v2-ws-close-then-http-cursor-attach-token"),
        pytest.param(2, "http", "kill", "ws", "start", False, False, id="v2-http-kill-then-ws-start"),
        pytest.param(1, "ws", "kill", "http", None, False, True, id="v1-ws-kill-then-http-load-stranger"),
        pytest.param(1, "http", "close", "ws", None, True, False, id="v1-http-close-then-ws-load-attach-token"),
    ],
)
async def test_a_typescript_client_leaves_the_bridge_mid_turn_and_another_comes_back(
    ts_ws_sdk: Path,  # noqa: F811
    bridge: Bridge,
    tmp_path: Path,
    version: int,
    leave_over: str,
    leave: str,
    back_over: str,
    replay: str | None,
    token: bool,
    stranger: bool,
) -> None:
    """The first client leaves by closing its stream (``close``: WebSocket close, HTTP ``DELETE``)
    or is killed (``kill``: SIGKILL); the second comes back over the other transport; with
    ``token`` it sends the first one's attach token (``_meta["acp-trio/attach"]`` of its
    ``initialize`` answer), so that the bridge starts no agent process for it, as the same editor
    reconnecting would.  With ``stranger``, a client of the other principal's bearer token tries
    first, in the second client's process, with the session id and the first one's attach token."""
    cwd = notes_dir(tmp_path)
    with trio.fail_after(DEADLINE):
        alice = {"version": version, "cwd": cwd, "token": ALICE}
        first = await ts_client(ts_ws_sdk, url=url_for(bridge.url, leave_over), leave=leave, leaveAfter=3, **alice)
        sid = first["sessionId"]
        attach = first["initialize"]["_meta"]["acp-trio/attach"]
        come_back: dict[str, Any] = {"url": url_for(bridge.url, back_over), **alice}
        if replay == "cursor":
            come_back["replayFrom"] = {"type": "_acp_trio_from", "update": numbered(first)[-1]["n"] + 1}
        elif replay == "start":
            come_back["replayFrom"] = {"type": "start"}
        if token:
            come_back["attach"] = attach
        if stranger:
            come_back["stranger"] = {"token": BOB, "attach": attach}
        processes = len(started(bridge.pids))
        second = await ts_client(ts_ws_sdk, sessionId=sid, **come_back)
    assert first["initialize"]["protocolVersion"] == version
    assert second["initialize"]["protocolVersion"] == version
    # the attach token: the first client's agent process is the second one's home again, and it
    # answered the initialize with its recorded first answer; without it, a process of its own
    assert second["initialize"]["_meta"].get("acp-trio/attached", False) is token
    assert len(started(bridge.pids)) == processes + (0 if token else 1) + stranger  # the stranger's: a new one
    if stranger:
        check_stranger(second["stranger"])
    check_turn(first, second, version, replayed_all=replay != "cursor")
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")


# -- AcpApp(host=...) in this process, with principals (items 1, 2, 5) -----------------------------


async def test_a_typescript_v2_client_comes_back_to_an_in_process_host_and_a_stranger_cannot(
    ts_ws_sdk: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    cwd = notes_dir(tmp_path)
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents_for()) as host, trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, AcpApp(host=host, token=TOKENS), "127.0.0.1", 0)
            url = binds[0] + "/acp"
            alice = {"version": 2, "cwd": cwd, "token": ALICE}
            first = await ts_client(ts_ws_sdk, url=url_for(url, "ws"), leave="close", leaveAfter=3, **alice)
            sid = first["sessionId"]
            # nobody attached, and the turn waits on the permission request nobody answered
            await host.wait_until(
                lambda: (host.sessions()[sid].attached, host.sessions()[sid].pending_requests) == (0, 1)
            )
            # bob knows the session id and even alice's attach token, but his bearer token is another
            # principal's; then alice comes back, first with two cursors the host refuses (attaching nothing)
            second = await ts_client(
                ts_ws_sdk,
                url=url_for(url, "http"),
                sessionId=sid,
                stranger={"token": BOB, "attach": first["initialize"]["_meta"]["acp-trio/attach"]},
                probes=[{"type": "_acp_trio_from", "update": 10**6}, {"type": "_elsewhere_from", "update": 1}],
                replayFrom={"type": "start"},
                **alice,
            )
            nursery.cancel_scope.cancel()
    check_stranger(second["stranger"])
    past_the_end, unknown = (probe["error"] for probe in second["probes"])
    assert (past_the_end["code"], unknown["code"]) == (-32602, -32602)  # the guide's answers to a bad cursor
    assert past_the_end["data"]["last"] == second["attach"]["result"]["_meta"]["acp-trio/lastUpdate"]
    check_turn(first, second, 2, replayed_all=True)
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")


async def test_two_typescript_v2_clients_at_once_see_the_same_updates_and_one_answers(
    ts_ws_sdk: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Item 3 with the SDK's clients: one stays attached over WebSocket without answering; another
    resumes over Streamable HTTP (``replayFrom`` start) and answers the permission request; the
    first one's copy is withdrawn with ``$/cancel_request`` (the SDK aborts its handler: -32800),
    and both see the same numbered updates up to the turn's end."""
    cwd = notes_dir(tmp_path)
    config = {"version": 2, "url": "", "cwd": cwd, "leave": "stay"}
    out, err = bytearray(), bytearray()
    announced = trio.Event()

    async def read(stream: Any, into: bytearray) -> None:
        async for data in stream:
            into += data
            if into is out and b"\n" in out:
                announced.set()
        announced.set()  # it ended: the assertions below say how

    with trio.fail_after(DEADLINE):
        async with open_session_host(agents_for()) as host, trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, AcpApp(host=host), "127.0.0.1", 0)
            url = binds[0] + "/acp"
            config["url"] = url_for(url, "ws")
            env = {**os.environ, "ACP_INTEROP_NPM_DIR": str(ts_ws_sdk)}
            command = ["node", str(INTEROP / "ts_host_client.mjs"), json.dumps(config)]
            watcher: trio.Process = await nursery.start(
                functools.partial(trio.run_process, command, stdout=-1, stderr=-1, env=env, check=False)
            )
            async with trio.open_nursery() as readers:  # until the watcher's output ends
                readers.start_soon(read, watcher.stdout, out)
                readers.start_soon(read, watcher.stderr, err)
                await announced.wait()
                assert b"\n" in out, f"ts_host_client.mjs exited ({await watcher.wait()}):\n{err.decode()}"
                sid = json.loads(out.split(b"\n", 1)[0])["sessionId"]
                other = await ts_client(
                    ts_ws_sdk, version=2, url=url_for(url, "http"), cwd=cwd, sessionId=sid, replayFrom={"type": "start"}
                )
            assert await watcher.wait() == 0, err.decode()
            nursery.cancel_scope.cancel()
    stayed = json.loads(out.decode().splitlines()[-1])
    assert stayed["sessionId"] == sid
    seen = numbered(stayed)
    assert [u["n"] for u in seen] == list(range(1, len(seen) + 1))
    assert numbered(other) == seen  # the same updates, in the same order, each once
    assert (seen[-1]["state"], seen[-1]["stopReason"]) == ("idle", "end_turn")
    [withdrawn] = stayed["permissions"]  # the copy the first answer (the other client's) withdrew
    assert (withdrawn["toolCallId"], withdrawn["withdrawn"]) == ("call_read", -32800)
    assert [(p["toolCallId"], p["answered"]) for p in other["permissions"]] == [("call_read", True)]
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")  # it was allowed
