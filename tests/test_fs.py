"""The client's file-system handler (``acp_trio.fs``): reads and writes bounded to a session's roots.

Spec: ``docs/protocol/v1/file-system.mdx`` (absolute paths, 1-based ``line``, ``limit`` in lines,
the client creates missing files) and ``session-setup.mdx`` (``cwd``, ``additionalDirectories``).
Requests go through a real in-memory agent/client pair: the agent calls the client with
``v1.ClientPeer``; the client binds a :class:`SessionFileSystem`'s methods in ``__init__``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import acp_trio
from acp_schema import v1
from acp_trio.fs import (
    MAX_READ_BYTES,
    FsError,
    FsNotFound,
    InvalidPath,
    PathOutsideRoots,
    SessionFileSystem,
    resolve_in_roots,
)

DEADLINE = 10


class Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(
            session_capabilities=v1.SessionCapabilities(
                close=v1.SessionCloseCapabilities(),
                additional_directories=v1.SessionAdditionalDirectoriesCapabilities(),
            )
        )
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()


class Tree:
    """``project`` (the cwd), ``extra`` (an additional directory) and ``outside`` (neither)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.project = base / "project"
        self.extra = base / "extra"
        self.outside = base / "outside"
        for d in (self.project, self.extra, self.outside):
            d.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text("top secret\n", encoding="utf-8")

    def snapshot(self, dir_mtimes: bool = True) -> dict[str, tuple[bytes | str, int]]:
        """Every entry under ``base``: contents (or link target) and mtime, to prove nothing changed
        (a directory's mtime also moves when a temporary file was created and removed in it)."""
        seen: dict[str, tuple[bytes | str, int]] = {}
        for dirpath, dirnames, filenames in os.walk(self.base):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    seen[str(p)] = (os.readlink(p), st.st_mtime_ns)
                elif stat.S_ISREG(st.st_mode):
                    seen[str(p)] = (p.read_bytes(), st.st_mtime_ns)
                else:
                    seen[str(p)] = (b"", st.st_mtime_ns if dir_mtimes or not stat.S_ISDIR(st.st_mode) else 0)
        return seen


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


class Harness:
    def __init__(self, peer: Any, fs: SessionFileSystem, tree: Tree, client_conn: Any) -> None:
        self.client_conn = client_conn
        self.peer = peer
        self.fs = fs
        self.tree = tree

    async def read(self, path: str | Path, line: int | None = None, limit: int | None = None, **kw: Any) -> str:
        extra: dict[str, Any] = {}
        if line is not None:
            extra["line"] = line
        if limit is not None:
            extra["limit"] = limit
        request = v1.ReadTextFileRequest(session_id=kw.get("session_id", "s1"), path=str(path), **extra)
        response = await self.peer.fs_read_text_file(request)
        assert isinstance(response.content, str)
        return response.content

    async def write(self, path: str | Path, content: str, session_id: str = "s1") -> None:
        await self.peer.fs_write_text_file(
            v1.WriteTextFileRequest(session_id=session_id, path=str(path), content=content)
        )

    async def refused(self, call: Any) -> acp_trio.RequestError:
        with pytest.raises(acp_trio.RequestError) as info:
            await call
        return info.value


@contextlib.asynccontextmanager
async def harness(tree: Tree, **options: Any) -> AsyncIterator[Harness]:
    made: list[SessionFileSystem] = []

    class Client:
        def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
            self.fs = SessionFileSystem(conn.sessions, **options)
            made.append(self.fs)
            # bound methods assigned on the instance: the runtime discovers them with getattr
            self.fs_read_text_file = self.fs.fs_read_text_file
            self.fs_write_text_file = self.fs.fs_write_text_file

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True))
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
            new = await client_conn.agent.session_new(
                v1.NewSessionRequest(cwd=str(tree.project), mcp_servers=[], additional_directories=[str(tree.extra)])
            )
            assert new.session_id == "s1"
            yield Harness(v1.ClientPeer(agent_conn), made[0], tree, client_conn)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- reading ---------------------------------------------------------------------------------------
LINES = "one\ntwo\r\nthree\nfour"


@pytest.mark.parametrize(
    ("line", "limit", "expected"),
    [
        (None, None, LINES),
        (1, None, LINES),
        (2, None, "two\r\nthree\nfour"),
        (2, 2, "two\r\nthree\n"),
        (4, 5, "four"),
        (1, 0, ""),
        (5, None, ""),  # past the end
        (10**6, 1, ""),
        (None, 1, "one\n"),
    ],
)
async def test_read_honours_line_and_limit_and_keeps_endings(
    tree: Tree, line: int | None, limit: int | None, expected: str
) -> None:
    (tree.project / "f.txt").write_bytes(LINES.encode())
    async with harness(tree) as h:
        assert await h.read(tree.project / "f.txt", line, limit) == expected


async def test_read_in_cwd_additional_directory_and_through_inner_symlinks(tree: Tree) -> None:
    (tree.project / "sub").mkdir()
    (tree.project / "sub" / "a.txt").write_text("héllo\n", encoding="utf-8")
    (tree.extra / "b.txt").write_text("extra\n", encoding="utf-8")
    (tree.project / "link.txt").symlink_to(tree.project / "sub" / "a.txt")
    (tree.project / "linkdir").symlink_to(tree.extra)  # a symlink into another root is fine
    async with harness(tree) as h:
        assert await h.read(tree.project / "sub" / "a.txt") == "héllo\n"
        assert await h.read(tree.extra / "b.txt") == "extra\n"
        assert await h.read(tree.project / "link.txt") == "héllo\n"
        assert await h.read(tree.project / "linkdir" / "b.txt") == "extra\n"
        assert await h.read(f"{tree.project}/sub/../sub/./a.txt") == "héllo\n"  # ".." that stays inside


def _escapes(tree: Tree) -> dict[str, Path | str]:
    """Ways out of the roots, each naming ``outside/secret.txt`` or a file next to it."""
    (tree.project / "evil.txt").symlink_to(tree.secret)
    (tree.project / "evildir").symlink_to(tree.outside)
    (tree.project / "dangling.txt").symlink_to(tree.outside / "new.txt")
    (tree.project / "hop").symlink_to("../outside")  # relative link target
    (tree.base / "project2").mkdir()  # shares the prefix "project" but is another directory
    return {
        "dotdot": f"{tree.project}/../outside/secret.txt",
        "dotdot-deep": f"{tree.project}/a/b/../../../outside/secret.txt",
        "absolute": tree.secret,
        "symlink": tree.project / "evil.txt",
        "symlinked-parent": tree.project / "evildir" / "secret.txt",
        "relative-symlink": tree.project / "hop" / "secret.txt",
        "dangling-symlink": tree.project / "dangling.txt",
        "prefix-sibling": tree.base / "project2" / "secret.txt",
        "above-roots": tree.base / "toplevel.txt",
    }


ESCAPES = [
    "dotdot",
    "dotdot-deep",
    "absolute",
    "symlink",
    "symlinked-parent",
    "relative-symlink",
    "dangling-symlink",
    "prefix-sibling",
    "above-roots",
]


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path passed to ``os.open``/``open`` while the test runs."""
    paths: list[str] = []
    real_os_open = os.open
    real_open = open

    def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        paths.append(os.fsdecode(path))
        return real_os_open(path, *args, **kwargs)

    def builtin_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, int):
            paths.append(os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr("builtins.open", builtin_open)
    return paths


@pytest.mark.parametrize("case", ESCAPES)
async def test_read_escapes_are_refused_before_opening_anything(tree: Tree, case: str, opened: list[str]) -> None:
    path = str(_escapes(tree)[case])
    overlay_calls: list[Path] = []

    def overlay(p: Path) -> str | None:
        overlay_calls.append(p)
        return None

    async with harness(tree, read_overlay=overlay) as h:
        before = tree.snapshot()
        opened.clear()
        err = await h.refused(h.read(path))
        assert err.code == acp_trio.INVALID_PARAMS
        assert err.message == "Path outside the session's directories"
        assert err.data["path"] == "$.path"
        assert err.data["filePath"] == path
        assert err.data["roots"] == [str(tree.project), str(tree.extra)]
        assert "outside the session's directories" in err.data["detail"]
        assert not Path(err.data["resolved"]).is_relative_to(tree.project)
        assert overlay_calls == []
        assert opened == []
        assert tree.snapshot() == before


@pytest.mark.parametrize("case", ESCAPES)
async def test_write_escapes_are_refused_and_write_nothing(tree: Tree, case: str, opened: list[str]) -> None:
    path = str(_escapes(tree)[case])
    writes: list[Path] = []
    async with harness(tree, on_write=lambda p, old, new: writes.append(p)) as h:
        before = tree.snapshot()
        opened.clear()
        err = await h.refused(h.write(path, "pwned\n"))
        assert err.code == acp_trio.INVALID_PARAMS
        assert err.data["filePath"] == path and err.data["roots"] == [str(tree.project), str(tree.extra)]
        assert opened == []
        assert writes == []
        assert tree.snapshot() == before  # same files, contents and mtimes; no temporary file left
        assert not (tree.outside / "new.txt").exists()
        assert tree.secret.read_text(encoding="utf-8") == "top secret\n"


@pytest.mark.parametrize("path", ["relative.txt", "./project/f.txt", "~/f.txt", ""])
async def test_relative_paths_are_invalid_params(tree: Tree, path: str) -> None:
    async with harness(tree) as h:
        before = tree.snapshot()
        for call in (h.read(path), h.write(path, "x")):
            err = await h.refused(call)
            assert err.code == acp_trio.INVALID_PARAMS
            assert err.data["path"] == "$.path" and err.data["filePath"] == path
            assert "absolute" in err.data["detail"]
        assert tree.snapshot() == before


async def test_nul_character_and_directory_syntax_are_invalid_params(tree: Tree) -> None:
    async with harness(tree) as h:
        before = tree.snapshot()
        err = await h.refused(h.read(f"{tree.project}/a\x00b"))
        assert err.code == acp_trio.INVALID_PARAMS and "NUL" in err.data["detail"]
        for path in (f"{tree.project}/new/", f"{tree.project}/new/.", f"{tree.project}/x/.."):
            err = await h.refused(h.write(path, "x"))
            assert err.code == acp_trio.INVALID_PARAMS and "names a directory" in err.data["detail"], path
        assert tree.snapshot() == before
        assert not (tree.project / "new").exists()


async def test_unknown_session_is_resource_not_found(tree: Tree) -> None:
    (tree.project / "f.txt").write_text("x", encoding="utf-8")
    async with harness(tree) as h:
        for call in (h.read(tree.project / "f.txt", session_id="nope"), h.write(tree.project / "g.txt", "y", "nope")):
            err = await h.refused(call)
            assert err.code == acp_trio.RESOURCE_NOT_FOUND
            assert err.data["sessionId"] == "nope" and err.data["path"] == "$.sessionId"
        assert not (tree.project / "g.txt").exists()


async def test_closed_session_is_refused(tree: Tree) -> None:
    (tree.project / "f.txt").write_text("x", encoding="utf-8")
    async with harness(tree) as h:
        assert h.fs.roots("s1") == (str(tree.project), str(tree.extra))
        assert await h.read(tree.project / "f.txt") == "x"
        await h.client_conn.agent.session_close(v1.CloseSessionRequest(session_id="s1"))
        err = await h.refused(h.read(tree.project / "f.txt"))
        assert err.code == acp_trio.RESOURCE_NOT_FOUND and err.data["sessionId"] == "s1"
        with pytest.raises(FsError) as caught:
            h.fs.roots("s1")
        assert caught.value.code == acp_trio.RESOURCE_NOT_FOUND


async def test_missing_file_directory_and_fifo(tree: Tree) -> None:
    (tree.project / "dir").mkdir()
    os.mkfifo(tree.project / "fifo")
    async with harness(tree) as h:
        err = await h.refused(h.read(tree.project / "missing.txt"))
        assert err.code == acp_trio.RESOURCE_NOT_FOUND
        # the reference TypeScript SDK's text and data key: clients (gemini-cli) tell a missing file by them
        assert err.message == "Resource not found"
        assert err.data["filePath"] == err.data["uri"] == str(tree.project / "missing.txt")
        err = await h.refused(h.read(tree.project / "dir"))
        assert err.code == acp_trio.INVALID_PARAMS and "is a directory" in err.data["detail"]
        err = await h.refused(h.read(tree.project))  # the root itself
        assert err.code == acp_trio.INVALID_PARAMS and "is a directory" in err.data["detail"]
        # a FIFO without a writer: refused at once, not waited on
        err = await h.refused(h.read(tree.project / "fifo"))
        assert err.code == acp_trio.INVALID_PARAMS and "not a regular file" in err.data["detail"]
        before = tree.snapshot()
        for target in (tree.project / "dir", tree.project / "fifo"):
            err = await h.refused(h.write(target, "x"))
            assert err.code == acp_trio.INVALID_PARAMS
        assert tree.snapshot() == before


async def test_not_utf8_names_the_byte_offset(tree: Tree) -> None:
    target = tree.project / "bin.dat"
    target.write_bytes(b"ok\nfine\nbad \xff\xfe here\n")
    async with harness(tree) as h:
        for line in (None, 3):
            err = await h.refused(h.read(target, line))
            assert err.code == acp_trio.INVALID_PARAMS
            assert err.message == "File is not UTF-8 text"
            assert err.data["offset"] == 12
            assert "0xff at byte offset 12" in err.data["detail"]
        # the lines before the bad byte are text
        assert await h.read(target, 1, 2) == "ok\nfine\n"
    latin1 = tree.project / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    async with harness(tree) as h:
        err = await h.refused(h.read(latin1))
        assert err.data["offset"] == 3


@pytest.mark.parametrize(("line", "limit", "field"), [(0, None, "$.line"), (-3, None, "$.line"), (1, -1, "$.limit")])
async def test_bad_line_or_limit_is_invalid_params(tree: Tree, line: int, limit: int | None, field: str) -> None:
    (tree.project / "f.txt").write_text("x\n", encoding="utf-8")
    async with harness(tree) as h:
        err = await h.refused(h.read(tree.project / "f.txt", line, limit))
        assert err.code == acp_trio.INVALID_PARAMS and err.data["path"] == field


async def test_max_read_bytes_caps_whole_files_and_windows(tree: Tree) -> None:
    target = tree.project / "big.txt"
    target.write_text("0123456789\n" * 10, encoding="utf-8")  # 110 bytes
    async with harness(tree, max_read_bytes=25) as h:
        err = await h.refused(h.read(target))
        assert err.code == acp_trio.INVALID_PARAMS
        assert (err.data["size"], err.data["maxBytes"]) == (110, 25)
        assert "line and limit" in err.data["detail"]
        assert await h.read(target, 5, 2) == "0123456789\n" * 2
        err = await h.refused(h.read(target, 5, 3))  # 33 bytes
        assert err.code == acp_trio.INVALID_PARAMS and err.data["maxBytes"] == 25
        err = await h.refused(h.read(target, 5))
        assert err.code == acp_trio.INVALID_PARAMS
    long_line = tree.project / "long.txt"
    long_line.write_bytes(b"x" * 200_000 + b"\nshort\n")  # skipping a line longer than the read chunk
    async with harness(tree) as h:
        assert await h.read(long_line, 2) == "short\n"
    with pytest.raises(ValueError):
        SessionFileSystem({}, max_read_bytes=0)
    assert MAX_READ_BYTES == 16 * 1024 * 1024


async def test_read_overlay_serves_unsaved_text(tree: Tree) -> None:
    on_disk = tree.project / "f.txt"
    on_disk.write_text("disk\n", encoding="utf-8")
    (tree.project / "alias.txt").symlink_to(on_disk)
    asked: list[Path] = []
    buffers = {on_disk: "buffer 1\nbuffer 2\nbuffer 3\n", tree.project / "unsaved.txt": "new buffer"}

    def overlay(path: Path) -> str | None:
        asked.append(path)
        return buffers.get(path)

    async with harness(tree, read_overlay=overlay, max_read_bytes=12) as h:
        assert await h.read(on_disk, 2, 1) == "buffer 2\n"
        assert await h.read(tree.project / "alias.txt", 3) == "buffer 3\n"  # resolved path is asked
        assert await h.read(tree.project / "unsaved.txt") == "new buffer"  # not on disk
        assert await h.read(tree.project / "unsaved.txt", 1, 5) == "new buffer"  # limit past the end
        assert await h.read(tree.project / "unsaved.txt", 2) == ""  # line past the end
        err = await h.refused(h.read(on_disk))  # the overlay's text is capped too
        assert err.data["maxBytes"] == 12
        (tree.project / "plain.txt").write_text("plain\n", encoding="utf-8")
        assert await h.read(tree.project / "plain.txt") == "plain\n"  # None: from disk
    assert asked[:3] == [on_disk, on_disk, tree.project / "unsaved.txt"]


async def test_overlay_is_not_asked_for_refused_paths(tree: Tree) -> None:
    asked: list[Path] = []

    def overlay(path: Path) -> str:
        asked.append(path)
        return "leak"

    async with harness(tree, read_overlay=overlay) as h:
        err = await h.refused(h.read(tree.secret))
        assert err.code == acp_trio.INVALID_PARAMS
    assert asked == []


# -- writing ---------------------------------------------------------------------------------------
def _temp_files(tree: Tree) -> list[str]:
    return [name for _, _, files in os.walk(tree.base) for name in files if name.endswith(".acp-tmp")]


async def test_write_creates_files_with_umask_mode_and_missing_parents(tree: Tree) -> None:
    mask = _umask()
    async with harness(tree) as h:
        await h.write(tree.project / "new.txt", "héllo\nwörld")
        await h.write(tree.extra / "a" / "b" / "deep.txt", "deep\n")
        await h.write(tree.project / "empty.txt", "")
    target = tree.project / "new.txt"
    assert target.read_bytes() == "héllo\nwörld".encode()
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert (tree.extra / "a" / "b" / "deep.txt").read_text(encoding="utf-8") == "deep\n"
    assert (tree.project / "empty.txt").read_bytes() == b""
    assert _temp_files(tree) == []


async def test_write_replaces_atomically_and_keeps_mode(tree: Tree) -> None:
    target = tree.project / "script.sh"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o750)
    inode = target.stat().st_ino
    async with harness(tree) as h:
        await h.write(target, "#!/bin/sh\necho new\n")
        assert await h.read(target) == "#!/bin/sh\necho new\n"
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o750
    assert st.st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert _temp_files(tree) == []


async def test_write_through_inner_symlink_updates_target_and_keeps_link(tree: Tree) -> None:
    real = tree.extra / "real.txt"
    real.write_text("before\n", encoding="utf-8")
    link = tree.project / "link.txt"
    link.symlink_to(real)
    dangling = tree.project / "later.txt"
    dangling.symlink_to(tree.project / "created-by-write.txt")
    async with harness(tree) as h:
        await h.write(link, "after\n")
        await h.write(dangling, "made\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text(encoding="utf-8") == "after\n"
    assert dangling.is_symlink()
    assert (tree.project / "created-by-write.txt").read_text(encoding="utf-8") == "made\n"


async def test_write_under_a_file_is_invalid_params(tree: Tree) -> None:
    (tree.project / "file.txt").write_text("x", encoding="utf-8")
    async with harness(tree) as h:
        before = tree.snapshot()
        for path in (tree.project / "file.txt" / "child.txt", tree.project / "file.txt" / "d" / "child.txt"):
            err = await h.refused(h.write(path, "y"))
            assert err.code == acp_trio.INVALID_PARAMS and "not a directory" in err.data["detail"]
        assert tree.snapshot() == before


async def test_failed_write_leaves_the_file_and_no_temporary(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tree.project / "keep.txt"
    target.write_text("precious\n", encoding="utf-8")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async with harness(tree) as h:
        before = tree.snapshot(dir_mtimes=False)  # the temporary file came and went
        monkeypatch.setattr(os, "fsync", full_disk)
        err = await h.refused(h.write(target, "replacement\n"))
        monkeypatch.undo()
        assert err.code == acp_trio.INTERNAL_ERROR
        assert err.data["errno"] == "ENOSPC" and "No space left" in err.data["detail"]
        assert tree.snapshot(dir_mtimes=False) == before
        assert _temp_files(tree) == []


@pytest.fixture
def permissions_enforced(tmp_path_factory: pytest.TempPathFactory) -> None:
    probe = tmp_path_factory.mktemp("probe") / "probe"
    probe.write_text("x", encoding="utf-8")
    probe.chmod(0)
    try:
        probe.read_bytes()
    except PermissionError:
        return
    pytest.skip("this process ignores permission bits (root with CAP_DAC_OVERRIDE)")


@pytest.mark.usefixtures("permissions_enforced")
async def test_permission_denied_is_a_clear_error(tree: Tree) -> None:
    locked = tree.project / "locked"
    locked.mkdir()
    (locked / "f.txt").write_text("x", encoding="utf-8")
    (tree.project / "private.txt").write_text("x", encoding="utf-8")
    (tree.project / "private.txt").chmod(0)
    locked.chmod(0o500)
    try:
        async with harness(tree) as h:
            err = await h.refused(h.write(locked / "f.txt", "y"))
            assert err.code == acp_trio.INTERNAL_ERROR and err.data["errno"] == "EACCES"
            err = await h.refused(h.read(tree.project / "private.txt"))
            assert err.code == acp_trio.INTERNAL_ERROR and err.data["errno"] == "EACCES"
    finally:
        locked.chmod(0o700)
    assert (locked / "f.txt").read_text(encoding="utf-8") == "x"


async def test_unencodable_content_is_invalid_params(tree: Tree) -> None:
    fs = SessionFileSystem({"s": acp_trio.SessionInfo("s", str(tree.project))})
    with pytest.raises(FsError) as caught:
        await fs.fs_write_text_file(
            v1.WriteTextFileRequest(session_id="s", path=str(tree.project / "x"), content="a\ud800")
        )
    assert caught.value.code == acp_trio.INVALID_PARAMS
    assert caught.value.data["path"] == "$.content" and caught.value.data["offset"] == 1
    assert not (tree.project / "x").exists()


async def test_read_only_file_system_refuses_writes(tree: Tree) -> None:
    target = tree.project / "f.txt"
    target.write_text("x\n", encoding="utf-8")
    async with harness(tree, writable=False) as h:
        assert h.fs.capabilities == v1.FileSystemCapabilities(read_text_file=True, write_text_file=False)
        err = await h.refused(h.write(target, "y\n"))
        assert err.code == acp_trio.METHOD_NOT_FOUND and err.data["method"] == "fs/write_text_file"
        assert await h.read(target) == "x\n"
    assert SessionFileSystem({}).capabilities == v1.FileSystemCapabilities(read_text_file=True, write_text_file=True)


async def test_on_write_gets_old_and_new_text(tree: Tree, caplog: pytest.LogCaptureFixture) -> None:
    (tree.project / "text.txt").write_text("old\n", encoding="utf-8")
    (tree.project / "bin.dat").write_bytes(b"\xff")
    calls: list[tuple[Path, str | None, str]] = []

    def on_write(path: Path, old: str | None, new: str) -> None:
        calls.append((path, old, new))
        if new == "boom":
            raise RuntimeError("editor failed")

    async with harness(tree, on_write=on_write) as h:
        await h.write(tree.project / "text.txt", "new\n")
        await h.write(tree.project / "fresh.txt", "fresh")
        await h.write(tree.project / "bin.dat", "text now")
        await h.write(tree.project / "boom.txt", "boom")  # the callback's failure does not fail the write
    assert calls == [
        (tree.project / "text.txt", "old\n", "new\n"),
        (tree.project / "fresh.txt", None, "fresh"),
        (tree.project / "bin.dat", None, "text now"),
        (tree.project / "boom.txt", None, "boom"),
    ]
    assert (tree.project / "boom.txt").read_text(encoding="utf-8") == "boom"
    assert "on_write callback" in caplog.text


async def test_on_write_old_text_is_none_over_max_read_bytes(tree: Tree) -> None:
    (tree.project / "big.txt").write_text("x" * 100, encoding="utf-8")
    calls: list[str | None] = []
    async with harness(tree, on_write=lambda p, old, new: calls.append(old), max_read_bytes=50) as h:
        await h.write(tree.project / "big.txt", "small")
    assert calls == [None]
    assert (tree.project / "big.txt").read_text(encoding="utf-8") == "small"


async def test_temporary_name_collision_is_retried(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    names = iter(["taken", "free"])
    monkeypatch.setattr("acp_trio.fs.secrets.token_hex", lambda n: next(names))
    squatter = tree.project / ".f.txt.taken.acp-tmp"
    squatter.write_text("someone else's", encoding="utf-8")
    async with harness(tree) as h:
        await h.write(tree.project / "f.txt", "mine")
    assert (tree.project / "f.txt").read_text(encoding="utf-8") == "mine"
    assert squatter.read_text(encoding="utf-8") == "someone else's"  # never truncated or removed
    assert not (tree.project / ".f.txt.free.acp-tmp").exists()


async def test_long_names_get_a_short_temporary_name(tree: Tree) -> None:
    name = "n" * 250  # the temporary name must stay under NAME_MAX (255 bytes)
    async with harness(tree) as h:
        await h.write(tree.project / name, "long")
    assert (tree.project / name).read_text(encoding="utf-8") == "long"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give files away")
async def test_write_keeps_owner_and_group(tree: Tree) -> None:
    target = tree.project / "owned.txt"
    target.write_text("x", encoding="utf-8")
    os.chown(target, 65534, 65534)
    async with harness(tree) as h:
        await h.write(target, "y")
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    assert target.read_text(encoding="utf-8") == "y"


async def test_parent_swapped_for_a_symlink_is_refused(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    # the race the check after makedirs catches: a created directory replaced by a link out of the roots
    def makedirs_then_swap(name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        os.symlink(tree.outside, name)

    monkeypatch.setattr(os, "makedirs", makedirs_then_swap)
    async with harness(tree) as h:
        err = await h.refused(h.write(tree.project / "newdir" / "f.txt", "pwned"))
    assert err.code == acp_trio.INVALID_PARAMS and err.data["resolved"] == str(tree.outside)
    assert sorted(p.name for p in tree.outside.iterdir()) == ["secret.txt"]


async def test_concurrent_writes_leave_one_complete_version(tree: Tree) -> None:
    target = tree.project / "race.txt"
    versions = [f"version {i}\n" * 1000 for i in range(8)]
    async with harness(tree) as h:
        async with trio.open_nursery() as nursery:
            for text in versions:
                nursery.start_soon(h.write, target, text)
    assert target.read_text(encoding="utf-8") in versions
    assert _temp_files(tree) == []


# -- resolve_in_roots ------------------------------------------------------------------------------
def test_resolve_in_roots_inside(tree: Tree) -> None:
    (tree.project / "f.txt").write_text("x", encoding="utf-8")
    (tree.base / "alias").symlink_to(tree.project)
    roots = [str(tree.base / "alias")]  # roots are realpath'ed too
    assert resolve_in_roots(str(tree.project / "f.txt"), roots) == tree.project / "f.txt"
    assert resolve_in_roots(str(tree.base / "alias" / "f.txt"), roots) == tree.project / "f.txt"
    assert resolve_in_roots(str(tree.project), roots) == tree.project  # a directory: a terminal's cwd
    assert (
        resolve_in_roots(str(tree.project / "n" / "new.txt"), roots, for_write=True) == tree.project / "n" / "new.txt"
    )
    assert resolve_in_roots(str(tree.secret), ["/"]) == tree.secret


def test_resolve_in_roots_refusals(tree: Tree) -> None:
    roots = [str(tree.project), "relative/root", "bad\x00root"]  # unusable roots contain nothing
    escapes = _escapes(tree)
    for case in ESCAPES:
        for for_write in (False, True):
            with pytest.raises(PathOutsideRoots) as caught:
                resolve_in_roots(str(escapes[case]), roots, for_write=for_write)
            assert caught.value.data["roots"] == roots
    with pytest.raises(PathOutsideRoots):
        resolve_in_roots(str(tree.project / "f.txt"), [])
    with pytest.raises(InvalidPath) as invalid:
        resolve_in_roots("rel", roots, field="$.cwd")
    assert invalid.value.data["path"] == "$.cwd" and invalid.value.code == acp_trio.INVALID_PARAMS
    with pytest.raises(FsNotFound) as missing:
        resolve_in_roots(str(tree.project / "missing"), roots, field="$.cwd")
    assert missing.value.code == acp_trio.RESOURCE_NOT_FOUND and missing.value.data["path"] == "$.cwd"
    with pytest.raises(InvalidPath, match="Invalid path"):
        resolve_in_roots(str(tree.project), roots, for_write=True)
    errors: list[Callable[[], object]] = [
        lambda: resolve_in_roots(str(tree.project / "x\x00"), roots),
        lambda: resolve_in_roots(f"{tree.project}/d/", roots, for_write=True),
    ]
    for call in errors:
        with pytest.raises(InvalidPath):
            call()
    # every refusal is a RequestError the runtime answers as is
    assert issubclass(PathOutsideRoots, acp_trio.RequestError) and issubclass(FsNotFound, FsError)


def test_resolve_in_roots_symlink_loop_is_not_found_or_outside(tree: Tree) -> None:
    loop = tree.project / "loop"
    loop.symlink_to(loop)
    roots = [str(tree.project)]
    with pytest.raises(FsError):
        resolve_in_roots(str(loop / "x"), roots)
