"""Takeover between two ``python -m acp_trio.host`` processes sharing a PostgreSQL store (issue 36 step 2).

Host ``a`` runs a session's turn; it is SIGKILLed; the client resumes on host ``b`` (polling
while ``a``'s lease, 1 s here, has not expired: ``b`` answers that ``a`` owns it) and gets the
whole history, the cut turn's ``idle`` with stop reason ``error``, and a working session (``b``'s
agent, a neutral agent given the host's PostgreSQL store by the host process, restores it from
there).  The time from the kill to the first answer from ``b`` is printed (``-s``) for the
takeover figure.  Then a drain that hands over at once (``handover = "at_once"``, SIGTERM): the
client is told ``moved: resume it again`` and ``b`` takes the session at once, no lease to wait
for.  The in-process tests are ``tests/test_host_takeover.py``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from _host_kit import Recorder, init2, new_session
from _postgres import pg_conninfo, postgres_server  # noqa: F401  (the fixtures)
from test_host_cli import HostProcess

from acp_schema import v2
from acp_trio import RequestError
from acp_trio.host import MOVED_REASON, OWNED_REASON, SESSION_ENDED

if TYPE_CHECKING:
    from _postgres import PostgresServer

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="signals"), pytest.mark.one_interpreter]

DEADLINE = 30
LEASE = 1.0

AGENT = '''
import trio
from acp_trio import neutral


class Echo(neutral.Agent):
    """"slow N": N chunks, one every 20 ms; anything else: one chunk."""

    async def prompt(self, turn):
        how, _, count = turn.text.partition(" ")
        if how != "slow":
            await turn.say(f"echo {turn.text}")
            return "end_turn"
        for i in range(int(count)):
            await trio.sleep(0.02)
            await turn.say(str(i))
        return "end_turn"
'''


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> PostgresServer:
    """The session's PostgreSQL server (``_postgres.postgres_server``)."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server


def texts(rec: Recorder) -> list[str]:
    return [u.content.text for u in rec.updates if type(u).__name__ == "AgentMessageChunkSessionUpdate"]


def numbered(rec: Recorder) -> list[tuple[int, Any]]:
    return [(n, u) for n, u in zip(rec.numbers, rec.updates, strict=True) if n is not None]


def idles(rec: Recorder) -> list[Any]:
    return [u for n, u in numbered(rec) if getattr(u, "session_update", None) == "state_update" and u.state == "idle"]


class Pair:
    def __init__(self, where: Path, pg: PostgresServer, handover: str) -> None:
        (where / "echo_agent.py").write_text(AGENT, encoding="utf-8")
        schema = f"takeover_{handover}"
        pg.conninfo(schema)
        self.store = "postgresql://postgres@/postgres?" + urllib.parse.urlencode(
            {"host": str(pg.socket_dir), "port": pg.port, "options": f"-csearch_path={schema}"}
        )
        self.where = where
        self.handover = handover
        self.hosts: dict[str, HostProcess] = {}

    def start(self, name: str) -> HostProcess:
        argv = [sys.executable, "-m", "acp_trio.host", "--agent", "echo_agent:Echo", "--listen", "127.0.0.1:0"]
        argv += ["--store", self.store, "--host-id", name, "--lease-seconds", str(LEASE)]
        argv += ["--handover", self.handover, "--drain-timeout", "5", "--log-level", "info"]
        host = self.hosts[name] = HostProcess(argv, self.where)
        host.wait_for("listening")
        return host

    def ws(self, name: str) -> str:
        return self.hosts[name].url.replace("http", "ws", 1) + "/acp"

    def stop(self) -> None:
        for host in self.hosts.values():
            host.stop()


def client(url: str, rec: Recorder) -> Any:
    from acp_trio.transports.websocket import connect_websocket

    return connect_websocket(url, rec, variant=v2)


async def make_running_session(url: str) -> tuple[str, Recorder]:
    rec = Recorder()
    async with client(url, rec) as conn:
        await init2(conn)
        sid = await new_session(conn)
        await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="one")]))
        await rec.until(lambda: len(idles(rec)) == 1)
        prompt = v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="slow 1000")])
        await conn.agent.session_prompt(prompt)
        await rec.until(lambda: len(texts(rec)) >= 6)
    return sid, rec


async def test_a_sigkilled_hosts_session_is_taken_over_by_another_host_process(
    tmp_path: Path, pg: PostgresServer
) -> None:
    pair = Pair(tmp_path, pg, "after_drain_timeout")
    try:
        pair.start("a")
        pair.start("b")
        with trio.fail_after(DEADLINE):
            sid, seen_rec = await make_running_session(pair.ws("a"))
            seen = numbered(seen_rec)
            os.killpg(pair.hosts["a"].process.pid, signal.SIGKILL)
            killed = time.monotonic()
            back = Recorder()
            async with client(pair.ws("b"), back) as conn:
                await init2(conn)
                owned = 0
                resume = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
                while True:
                    try:
                        await conn.agent.session_resume(resume)
                        break
                    except RequestError as exc:
                        assert exc.data["reason"] == OWNED_REASON and exc.data["owner"] == "a", exc
                        owned += 1
                        await trio.sleep(0.05)  # a's lease has not expired yet: poll the other process
                took = time.monotonic() - killed
                print(f"\ntakeover: {took * 1000:.0f} ms from SIGKILL to the resume answered (lease {LEASE} s)")
                assert owned >= 1  # a's lease held for a while after the kill
                got = numbered(back)
                assert got[: len(seen)] == seen  # everything acknowledged before the kill, exactly
                # a went on journaling its turn's chunks from the client's leaving to the SIGKILL (one
                # every 20 ms: none at all on an idle machine, several under load), so after what was
                # seen come the turn's next chunks, in order, then one idle 'error' (the cut turn).
                *more, (_, last) = got[len(seen) :]
                shown = len(texts(seen_rec)) - 1  # "echo one", then "0", "1", ... of the slow turn
                assert [type(u).__name__ for _, u in more] == ["AgentMessageChunkSessionUpdate"] * len(more)
                assert [u.content.text for _, u in more] == [str(i) for i in range(shown, shown + len(more))]
                assert (last.session_update, last.state, last.stop_reason) == ("state_update", "idle", "error")
                assert [n for n, _ in got] == list(range(1, len(got) + 1))
                await conn.agent.session_prompt(
                    v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="two")])
                )
                await back.until(lambda: len(idles(back)) == 3)
                assert texts(back)[-1] == "echo two"
                assert [n for n, _ in numbered(back)] == list(range(1, len(numbered(back)) + 1))
    finally:
        pair.stop()


async def test_a_drain_hands_its_sessions_over_at_once(tmp_path: Path, pg: PostgresServer) -> None:
    pair = Pair(tmp_path, pg, "at_once")
    try:
        pair.start("a")
        pair.start("b")
        with trio.fail_after(DEADLINE):
            rec = Recorder()
            async with connected_ws(pair.ws("a"), rec) as conn:
                await init2(conn)
                sid = await new_session(conn)
                await conn.agent.session_prompt(
                    v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="one")])
                )
                await rec.until(lambda: len(idles(rec)) == 1)
                pair.hosts["a"].process.send_signal(signal.SIGTERM)
                await rec.until(lambda: any(m == SESSION_ENDED for m, _ in rec.ext))
            (params,) = [p for m, p in rec.ext if m == SESSION_ENDED]
            assert params["reason"] == MOVED_REASON
            assert await trio.to_thread.run_sync(pair.hosts["a"].process.wait) == 0
            back = Recorder()
            async with client(pair.ws("b"), back) as conn:
                await init2(conn)
                resume = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
                await conn.agent.session_resume(resume)  # at once: the lease was released, not left to expire
                assert numbered(back) == numbered(rec)
    finally:
        pair.stop()


def connected_ws(url: str, rec: Recorder) -> Any:
    """:func:`client`, recording the host's ``_acp_trio/session_ended`` in ``rec.ext``."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def connect() -> Any:
        async with client(url, rec) as conn:

            async def ended(params: Any) -> None:
                rec.ext.append((SESSION_ENDED, params))
                rec.changed.unpark_all()

            conn.on_ext_notification(SESSION_ENDED, ended)
            yield conn

    return connect()
