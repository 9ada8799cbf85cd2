"""The bridge's ``--detach`` with ``--token-file``: bearer tokens as principals (issue 35, items 4 and 5).

Alice (one of her tokens) starts a turn of the demo agent behind ``serve_bridge(detach=True,
token=read_token_file(...))`` and leaves while it waits on her permission; bob (his token)
presents her session id, and her attach token, and is refused (-32002, as for a session that does
not exist; a process of his own, ``"acp-trio/attached": false``) and sees nothing of her session;
alice's phone (her other token) presents the attach token, gets her laptop's process back, resumes
(v2) or loads (v1) the session, answers the request, and has every update once, in order, to the
turn's end.  Over WebSocket and Streamable HTTP, on loopback sockets, the tokens file being the one
the guide prints.  The guide's ``--token-file`` command runs as printed, and the file's errors are
checked line by line.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from test_bridge_detach import (  # pytest's default ("prepend") import mode puts tests/ on sys.path
    DEADLINE,
    GUIDE,
    Client,
    alive,
    demo_command,
    guide_line,
    notes_dir,
    started,
)

from acp_schema import v1, v2
from acp_trio import ConnectionClosed, RequestError
from acp_trio.bridge import main, read_token_file, serve_bridge
from acp_trio.host import ATTACH_META_KEY, ATTACHED_META_KEY

pytest.importorskip("hypercorn")


def processes(test: Any) -> Any:
    """A test that runs agent processes on sockets: POSIX (process groups), one interpreter (the
    host's rules are tested in tests/test_host*.py)."""
    test = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")(test)
    return pytest.mark.one_interpreter(test)


def guide_tokens() -> str:
    """The guide's example ``tokens.txt`` (its ``text`` block that starts with ``# PRINCIPAL TOKEN``)."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("```text\n# PRINCIPAL TOKEN\n") + len("```text\n")
    return text[start : text.index("```", start)]


def write_tokens(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.txt"
    path.write_bytes(text.encode("latin-1") if "\xe9" in text else text.encode())
    path.chmod(0o600)
    return path


def tokens_of(tokens: dict[str, str], principal: str) -> list[str]:
    """``principal``'s tokens in ``tokens`` (``{token: principal}``), in the file's order."""
    return [token for token, holder in tokens.items() if holder == principal]


Connect = Callable[[Any, str], AbstractAsyncContextManager[Any]]


def connector(url: str, transport: str, variant: Any) -> Connect:
    """``connect(client, token)`` over ``transport`` to ``url`` (``http://.../acp``), in ``variant``."""
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    def connect(client: Any, token: str) -> AbstractAsyncContextManager[Any]:
        headers = {"Authorization": f"Bearer {token}"}
        if transport == "ws":
            return connect_websocket(url.replace("http://", "ws://"), client, headers=headers, variant=variant)
        return connect_http(url, client, headers=headers, variant=variant)

    return connect


async def initialize(conn: Any, variant: Any, attach: str | None = None) -> dict[str, Any]:
    """``initialize`` (raw: its answer's ``_meta`` holds the attach token), presenting ``attach``."""
    params: dict[str, Any] = {"protocolVersion": 2 if variant is v2 else 1}
    if variant is v2:
        params["info"] = {"name": "test-principals", "version": "1"}
    if attach is not None:
        params["_meta"] = {ATTACH_META_KEY: attach}
    answer: dict[str, Any] = await conn.connection.request("initialize", params)
    return answer


async def attach(conn: Any, variant: Any, sid: str, cwd: str) -> Any:
    """``session/resume`` replaying from the start (v2) or ``session/load`` (v1) of ``sid``."""
    if variant is v2:
        params = {"sessionId": sid, "cwd": cwd, "replayFrom": {"type": "start"}}
        return await conn.connection.request("session/resume", params)
    return await conn.connection.request("session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})


async def prompt_until_gone(conn: Any, sid: str) -> None:
    """A v1 ``session/prompt`` whose connection closes before its answer (leaving, not cancelling)."""
    with pytest.raises(ConnectionClosed):
        await conn.connection.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})


@asynccontextmanager
async def bridge(pids: Path, tokens: dict[str, str], **options: Any) -> AsyncIterator[str]:
    """``serve_bridge(detach=True, token=tokens)`` around the pid-writing demo agent on a free
    loopback port: its ``http://127.0.0.1:PORT/acp``.  Leaving stops it and its processes."""
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(
            functools.partial(serve_bridge, demo_command(pids), "127.0.0.1", 0, detach=True, token=tokens, **options)
        )
        yield urls[0] + "/acp"
        nursery.cancel_scope.cancel()


def ended(client: Client, variant: Any) -> bool:
    return client.idle() if variant is v2 else bool(client.turn_ended)


@pytest.mark.parametrize(
    ("transport", "variant"),
    # both transports and both ways to attach; AcpApp hands the principal to the host the same way on
    # either (tests/test_host_principals.py tries the four pairs on the host itself)
    [("ws", v2), ("http", v1)],
    ids=["websocket-v2-resume", "http-v1-load"],
)
@processes
async def test_bob_cannot_attach_to_alices_session_with_its_id_or_her_attach_token_and_her_phone_can(
    tmp_path: Path, transport: str, variant: Any
) -> None:
    pids = tmp_path / "pids"
    cwd = notes_dir(tmp_path)
    tokens = read_token_file(write_tokens(tmp_path, guide_tokens()))
    laptop, phone = tokens_of(tokens, "alice")
    (bobs,) = tokens_of(tokens, "bob")
    with trio.fail_after(DEADLINE):
        async with bridge(pids, tokens) as url, trio.open_nursery() as prompts:
            connect = connector(url, transport, variant)
            alice = Client(answer=False)
            async with connect(alice, laptop) as conn:
                answer = await initialize(conn, variant)
                attach_token = answer["_meta"][ATTACH_META_KEY]
                sid = (await conn.connection.request("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
                if variant is v2:
                    await conn.connection.request(
                        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "summarize"}]}
                    )
                else:
                    prompts.start_soon(prompt_until_gone, conn, sid)
                await alice.until(lambda: alice.asked)  # the turn waits on alice: she leaves
            (alices,) = started(pids)

            bob = Client()
            async with connect(bob, bobs) as conn:
                if variant is v1:
                    bob.watch_turn_ended(conn)
                answer = await initialize(conn, variant, attach=attach_token)
                assert answer["_meta"][ATTACHED_META_KEY] is False  # her token is not his: a process of his own
                assert answer["_meta"][ATTACH_META_KEY] != attach_token
                assert len(started(pids)) == 2
                for _attempt in range(2):  # her session id, after presenting her attach token: refused each time
                    with pytest.raises(RequestError) as refused:
                        await attach(conn, variant, sid, cwd)
                    assert refused.value.code == -32002
                    # the guide's words, as for a session that does not exist
                    assert refused.value.message.startswith("Resource not found") and sid in refused.value.message
                with pytest.raises(RequestError) as refused:  # nor may he cancel or prompt in it
                    await conn.connection.request(
                        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}
                    )
                assert refused.value.code == -32002
                await conn.connection.notify("session/cancel", {"sessionId": sid})  # dropped: not his
            assert (bob.updates, bob.asked, bob.turn_ended) == ([], [], [])

            again = Client()
            async with connect(again, phone) as conn:
                if variant is v1:
                    again.watch_turn_ended(conn)
                answer = await initialize(conn, variant, attach=attach_token)
                assert answer["_meta"][ATTACHED_META_KEY] is True  # her own process back: no new one
                assert answer["_meta"][ATTACH_META_KEY] == attach_token
                await attach(conn, variant, sid, cwd)
                await again.until(lambda: ended(again, variant))
            assert len(started(pids)) == 2 and alive(alices)
            prompts.cancel_scope.cancel()
    numbers = again.numbers()
    assert numbers == list(range(1, len(numbers) + 1))  # the whole turn, each update once, in order
    assert numbers[: len(alice.numbers())] == alice.numbers()
    assert len(again.asked) == 1 and again.asked[0].session_id == sid  # bob's cancel did not end the turn
    if variant is v1:
        assert again.turn_ended == [{"sessionId": sid, "stopReason": "end_turn"}]
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")
    assert not any(alive(pid) for pid in started(pids))


@processes
async def test_the_guides_token_file_command_serves_each_principal_its_own_sessions(tmp_path: Path) -> None:
    """``python -m acp_trio.bridge ... --detach --token-file tokens.txt`` as the guide prints it, with
    the guide's ``tokens.txt``: a token not in the file is ``401``; bob cannot resume alice's
    session; alice's phone can."""
    import httpx

    command = guide_line("python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --token-file")
    tokens = read_token_file(write_tokens(tmp_path, guide_tokens()))
    laptop, phone = tokens_of(tokens, "alice")
    (bobs,) = tokens_of(tokens, "bob")
    process = await trio.lowlevel.open_process(command, cwd=tmp_path, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    try:
        with trio.fail_after(DEADLINE):
            seen = b""
            while b"/acp\n" not in seen:
                chunk = await process.stderr.receive_some(1 << 16)
                assert chunk, f"the bridge ended: {seen.decode()}"
                seen += chunk
            assert b"for 2 principal(s)" in seen
            url = next(w for w in seen.decode().split() if w.startswith("ws://"))
            async with httpx.AsyncClient() as raw:
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 2}}
                for token in ("not-in-the-file", laptop[:-1]):
                    headers = {"Authorization": f"Bearer {token}"}
                    refused = await raw.post(url.replace("ws", "http", 1), json=init, headers=headers)
                    assert refused.status_code == 401
            connect = connector(url.replace("ws", "http", 1), "ws", v2)
            async with connect(Client(), laptop) as conn:
                attach_token = (await initialize(conn, v2))["_meta"][ATTACH_META_KEY]
                sid = (await conn.connection.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                    "sessionId"
                ]
            async with connect(Client(), bobs) as conn:
                await initialize(conn, v2)
                with pytest.raises(RequestError) as refused_resume:
                    await attach(conn, v2, sid, str(tmp_path))
                assert refused_resume.value.code == -32002
            async with connect(Client(), phone) as conn:
                assert (await initialize(conn, v2, attach=attach_token))["_meta"][ATTACHED_META_KEY] is True
                resumed = await attach(conn, v2, sid, str(tmp_path))
                assert "sessionId" not in resumed or resumed["sessionId"] == sid
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
    assert process.returncode is not None


TOKEN_LINES = "alice Vq3cM0hTnB2wR8yKd5Lx\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("# PRINCIPAL TOKEN\n\nalice\n", "tokens.txt, line 3: expected 'PRINCIPAL TOKEN' (two words), got 1 word(s)"),
        (TOKEN_LINES + "bob s3cr3t extra\n", "tokens.txt, line 2: expected 'PRINCIPAL TOKEN' (two words), got 3"),
        (TOKEN_LINES + "bob s3cr=t\n", "tokens.txt, line 2: the token of 'bob' is not a bearer token (RFC 6750"),
        (TOKEN_LINES + "  # a comment\nbob Vq3cM0hTnB2wR8yKd5Lx\n", "tokens.txt, line 3: the token of line 1 again"),
        ("# nobody yet\n\n", "tokens.txt: no 'PRINCIPAL TOKEN' line"),
        ("alice caf\xe9\n", "tokens.txt: not UTF-8 text (byte 9: invalid continuation byte)"),
    ],
)
def test_a_bad_token_file_is_refused_naming_the_line_and_never_the_token(
    tmp_path: Path, text: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_tokens(tmp_path, text)
    with pytest.raises(ValueError) as refused:
        read_token_file(path)
    assert error in str(refused.value)
    for secret in ("Vq3cM0hTnB2wR8yKd5Lx", "s3cr3t", "s3cr=t"):
        assert secret not in str(refused.value)
    with pytest.raises(SystemExit):  # the command line says the same, as a usage error
        main(["--listen", "127.0.0.1:0", "--detach", "--token-file", str(path), "--", "agent"])
    err = capsys.readouterr().err
    assert (
        f"--token-file: {tmp_path / error.split(',')[0].split(':')[0]}" in err and error.split(": ", 1)[1][:30] in err
    )


def test_token_file_rules_the_tokens_principals_and_the_files_mode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = read_token_file(write_tokens(tmp_path, guide_tokens()))
    assert sorted(set(tokens.values())) == ["alice", "bob"] and len(tokens) == 3
    tab = write_tokens(tmp_path, "\ufeffcarol\tabc-._~+/09==\r\n")  # BOM, tab, every b64token character, '=', CRLF
    assert read_token_file(tab) == {"abc-._~+/09==": "carol"} and not caplog.records
    tab.chmod(0o644)
    read_token_file(tab)
    (warning,) = caplog.records
    assert "other users may read it (mode 644): chmod 600 it" in warning.getMessage()
    for argv, message in (
        (["--token", "T", "--token-file", str(tab)], "--token and --token-file do not combine"),
        (["--token-file", str(tmp_path / "missing.txt")], "--token-file: [Errno 2] No such file or directory"),
    ):
        with pytest.raises(SystemExit):
            main(["--listen", "127.0.0.1:0", *argv, "--", "agent"])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--connect", "ws://127.0.0.1:1/acp", "--token-file", str(tab)])
    assert "--token-file is for --listen" in capsys.readouterr().err


ECHO_AGENT = (
    "import json, sys; line = sys.stdin.readline(); "
    "print(json.dumps({'jsonrpc': '2.0', 'id': json.loads(line)['id'], 'result': {'protocolVersion': 1}}), "
    "flush=True); sys.stdin.read()"
)
"""An agent that answers the first request ``{"protocolVersion": 1}``, then waits for the end of its input."""


@pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")
async def test_a_token_file_without_detach_accepts_each_listed_token(tmp_path: Path) -> None:
    """Without ``--detach`` each connection has its own process, so principals decide nothing, but
    every token of the file opens a connection and any other is ``401``."""
    import httpx

    tokens = read_token_file(write_tokens(tmp_path, guide_tokens()))
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            bridge_call = functools.partial(
                serve_bridge, [sys.executable, "-c", ECHO_AGENT], "127.0.0.1", 0, token=tokens, shutdown_timeout=0.5
            )
            urls: list[str] = await nursery.start(bridge_call)
            async with httpx.AsyncClient() as raw:
                for token in (*tokens, "not-in-the-file"):
                    headers = {"Authorization": f"Bearer {token}"}
                    answer = await raw.post(urls[0] + "/acp", json=init, headers=headers)
                    if token in tokens:
                        assert answer.status_code == 200 and answer.json()["result"] == {"protocolVersion": 1}
                        closed = {**headers, "acp-connection-id": answer.headers["acp-connection-id"]}
                        assert (await raw.delete(urls[0] + "/acp", headers=closed)).status_code == 202
                    else:
                        assert answer.status_code == 401
            nursery.cancel_scope.cancel()
