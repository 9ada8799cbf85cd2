"""The client's file system: ``fs/read_text_file`` and ``fs/write_text_file`` bounded to a session's directories.

Spec: ``docs/protocol/v1/file-system.mdx`` and the schema's ``ReadTextFileRequest``,
``WriteTextFileRequest`` (``path`` is absolute; ``line`` is 1-based; ``limit`` is a number of lines;
the client MUST create a file that does not exist), ``session-setup.mdx`` (a session's ``cwd`` and
``additionalDirectories``).

:class:`SessionFileSystem` answers both methods for the sessions of one connection
(``conn.sessions``).  A client delegates to it, or binds its methods in ``__init__``::

    class MyClient:
        def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
            self.fs = SessionFileSystem(conn.sessions)
            self.fs_read_text_file = self.fs.fs_read_text_file
            self.fs_write_text_file = self.fs.fs_write_text_file

and advertises ``ClientCapabilities(fs=fs.capabilities)`` in its ``initialize`` request.

Rules (POSIX):

- ``path`` must be absolute.  It is resolved with :func:`os.path.realpath` (symbolic links followed,
  also dangling ones, and ``..`` applied after them) and must then lie inside one of the session's
  roots (``cwd`` first, then ``additionalDirectories``), themselves realpath'ed.  A path that
  escapes (``..``, another absolute path, a symlink to a file or directory elsewhere, a dangling
  symlink naming a file elsewhere) is refused before anything is opened, read or written.
- Reads and writes go to the resolved path: writing through a symlink inside the roots updates its
  target and keeps the link.  The final component is opened with ``O_NOFOLLOW``, so a symlink
  swapped in after the check makes the request fail.  A swap of an intermediate directory between
  the check and the open is not detected (it needs a process that already writes inside the roots).
  A hard link inside the roots is inside the roots.
- Text is UTF-8, without any newline translation.  A line ends after ``\\n`` (so ``\\r\\n`` lines
  count once and keep both characters); ``line``/``limit`` select whole lines with their endings.
- Writes are atomic: the bytes go to a temporary file ``.<name>.<random>.acp-tmp`` in the target's
  directory, which is fsync'ed and renamed over the target (then the directory is fsync'ed).  An
  existing file keeps its permission bits (and owner and group, when the process may set them); a
  new file gets ``0o666`` minus the umask, like any file the user creates.  Missing parent
  directories are created (the spec is silent; they are inside the roots since the whole path is).
  On failure the temporary file is removed and the target is untouched.  A file with several hard
  links is replaced, not updated in place, so its other links keep the old text.

Errors (each a :class:`FsError`, a :class:`~acp_trio.RequestError`; ``data`` always has ``detail``,
a sentence; ``path`` is the JSON path of the offending request field, as for the runtime's own
-32602 answers; ``filePath`` is the path as sent):

==============================================  ======  ===========================================
case                                            code    class, extra ``data``
==============================================  ======  ===========================================
unknown ``sessionId``                           -32002  :class:`FsError`, ``sessionId``
relative, NUL, ends in ``/``, ``/.``, ``/..``   -32602  :class:`InvalidPath`
outside the session's roots                     -32602  :class:`PathOutsideRoots`, ``resolved``, ``roots``
file missing (read)                             -32002  :class:`FsNotFound`, ``uri`` ("Resource not found")
a directory, FIFO, device (read or write)       -32602  :class:`InvalidPath`
parent path component is a file (write)         -32602  :class:`InvalidPath`
``line`` < 1, ``limit`` < 0                     -32602  :class:`FsError`
not UTF-8 (read)                                -32602  :class:`FsError`, ``offset`` (byte offset in the file)
unencodable ``content`` (lone surrogate)        -32602  :class:`FsError`, ``offset`` (character index)
text selected > ``max_read_bytes``              -32602  :class:`FsError`, ``size``, ``maxBytes``
writes disabled (``writable=False``)            -32601  :class:`FsError`, ``method``
operating-system error (EACCES, ENOSPC, ...)    -32603  :class:`FsError`, ``errno`` (name, ``"EACCES"``)
==============================================  ======  ===========================================
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from acp_schema import v1

from ._core import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RequestError
from ._sessions import SessionInfo
from ._spec import UNSET

log = logging.getLogger("acp_trio.fs")

MAX_READ_BYTES: Final = 16 * 1024 * 1024
"""Default cap on the UTF-8 bytes one ``fs/read_text_file`` answers with (16 MiB): half the runtime's
default ``max_message_size``, leaving room for JSON escaping."""

_CHUNK: Final = 64 * 1024
_TEMP_SUFFIX: Final = ".acp-tmp"
_NAME_KEEP: Final = 100  # characters of the target's name kept in the temporary name (NAME_MAX is 255 bytes)


class FsError(RequestError):
    """A refused or failed file-system request, answered as the JSON-RPC error it is.

    ``code``, ``message``, ``data`` as for :class:`~acp_trio.RequestError`; ``data`` is a dict with
    at least ``detail`` (see the module docstring for the codes and keys).
    """

    data: dict[str, Any]

    def __init__(self, code: int, message: str, data: dict[str, Any]) -> None:
        super().__init__(code, message, data)


class InvalidPath(FsError):
    """-32602: the path is not usable (relative, contains NUL, names a directory or a special file)."""

    def __init__(self, detail: str, file_path: str, *, field: str = "$.path", **extra: Any) -> None:
        super().__init__(
            INVALID_PARAMS, "Invalid path", {"path": field, "filePath": file_path, "detail": detail, **extra}
        )


class PathOutsideRoots(FsError):
    """-32602: the path resolves outside the session's ``cwd`` and ``additionalDirectories``.

    ``data``: ``path`` (JSON path of the field), ``filePath`` (as sent), ``resolved`` (after
    following symlinks and ``..``), ``roots`` (the allowed directories, as given), ``detail``.
    """

    def __init__(self, file_path: str, resolved: str, roots: Sequence[str], *, field: str = "$.path") -> None:
        shown = f"{file_path} resolves to {resolved}, which" if resolved != os.path.normpath(file_path) else file_path
        detail = f"{shown} is outside the session's directories ({', '.join(roots) or 'none'})"
        data = {"path": field, "filePath": file_path, "resolved": resolved, "roots": list(roots), "detail": detail}
        super().__init__(INVALID_PARAMS, "Path outside the session's directories", data)


class FsNotFound(FsError):
    """-32002 (``RESOURCE_NOT_FOUND``): nothing exists at the (resolved, allowed) path.

    The message is ``"Resource not found"``, the reference TypeScript SDK's
    (``RequestError.resourceNotFound``), which clients match to tell a missing file from other
    failures (gemini-cli's ``write_file`` of a new file reads it first); ``data.uri`` is the path
    as sent, the key that SDK uses, beside this module's ``path``, ``filePath``, ``resolved`` and
    ``detail``."""

    def __init__(self, file_path: str, resolved: str, *, field: str = "$.path") -> None:
        detail = f"{file_path} does not exist"
        data = {"path": field, "filePath": file_path, "resolved": resolved, "uri": file_path, "detail": detail}
        super().__init__(RESOURCE_NOT_FOUND, "Resource not found", data)


# -- paths -----------------------------------------------------------------------------------------
def _contained(resolved: str, roots: Sequence[str], file_path: str, field: str) -> None:
    for root in roots:
        if "\x00" in root or not os.path.isabs(root):
            continue  # a root that cannot be a directory contains nothing
        real_root = os.path.realpath(root)
        if os.path.commonpath([real_root, resolved]) == real_root:
            return
    log.info("refused %s: resolves to %s, outside %s", file_path, resolved, list(roots))
    raise PathOutsideRoots(file_path, resolved, roots, field=field)


def _resolve(file_path: str, roots: Sequence[str], field: str, *, file: bool = True) -> Path:
    if "\x00" in file_path:
        raise InvalidPath(f"the path {file_path!r} contains a NUL character", file_path, field=field)
    if not os.path.isabs(file_path):
        raise InvalidPath(f"the path must be absolute, got {file_path!r}", file_path, field=field)
    if file and os.path.basename(file_path) in ("", ".", ".."):
        # realpath would drop the trailing "/", "/." or "/..": the kernel would not open such a path as a file
        raise InvalidPath(f"{file_path} names a directory, not a file", file_path, field=field)
    resolved = os.path.realpath(file_path)
    _contained(resolved, roots, file_path, field)
    return Path(resolved)


def resolve_in_roots(
    path: str,
    roots: Sequence[str],
    *,
    for_write: bool = False,
    field: str = "$.path",
) -> Path:
    """The real path of ``path`` if it lies inside one of ``roots``, else raise.

    ``path``: an absolute path (``str``).  ``roots``: absolute directories (a session's
    :attr:`~acp_trio.SessionInfo.roots`); they are realpath'ed, relative ones are ignored.
    ``path`` is realpath'ed (symlinks, also dangling ones, and ``..`` resolved) and must then be a
    root or lie below one.  ``for_write=False`` (a file to read, a terminal's ``cwd``): the path must
    exist (a file or a directory).  ``for_write=True`` (a file to create or replace): it may be
    missing, as may its parent directories, but must not be a directory nor end in ``/``, ``/.``
    or ``/..``.  ``field``: the JSON path named in errors (``"$.path"``, ``"$.cwd"``).

    Blocking (``lstat`` calls): from async code run it in a thread
    (``await trio.to_thread.run_sync(...)``).

    Raises :class:`InvalidPath` (relative, NUL, a directory when ``for_write``),
    :class:`PathOutsideRoots`, :class:`FsNotFound` (missing and not ``for_write``).
    """
    resolved = _resolve(path, roots, field, file=for_write)
    if for_write:
        if resolved.is_dir():
            raise InvalidPath(f"{path} is a directory, not a file", path, field=field)
    elif not resolved.exists():
        raise FsNotFound(path, str(resolved), field=field)
    return resolved


def _os_error(exc: OSError, file_path: str, action: str) -> FsError:
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    detail = f"cannot {action} {file_path}: {exc.strerror or exc}"
    return FsError(INTERNAL_ERROR, f"Cannot {action} file", {"filePath": file_path, "errno": name, "detail": detail})


def _check_regular(st: os.stat_result, file_path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InvalidPath(f"{file_path} is a directory, not a file", file_path)
    if not stat.S_ISREG(st.st_mode):
        raise InvalidPath(f"{file_path} is not a regular file (a FIFO, socket or device)", file_path)


def _too_large(file_path: str, size: int, max_bytes: int, *, whole: bool) -> FsError:
    what = "the file" if whole else "the selected lines"
    detail = f"{what} of {file_path} exceed(s) {max_bytes} bytes; read it in parts with line and limit"
    data = {"path": "$.path", "filePath": file_path, "size": size, "maxBytes": max_bytes, "detail": detail}
    return FsError(INVALID_PARAMS, "File too large", data)


# -- reading ---------------------------------------------------------------------------------------
def _slice_text(text: str, line: int, limit: int | None) -> str:
    """Lines ``line`` (1-based) .. ``line + limit - 1`` of ``text``, with their endings."""
    start = 0
    for _ in range(line - 1):
        found = text.find("\n", start)
        if found < 0:
            return ""
        start = found + 1
    if limit is None:
        return text[start:]
    end = start
    for _ in range(limit):
        found = text.find("\n", end)
        if found < 0:
            return text[start:]
        end = found + 1
    return text[start:end]


def _read_window(resolved: Path, file_path: str, line: int, limit: int | None, max_bytes: int) -> str:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: the checked path has no
        # symlink, so one appearing now is a swap
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FsNotFound(file_path, str(resolved)) from None
    except OSError as exc:
        raise _os_error(exc, file_path, "read") from None
    try:
        st = os.fstat(fd)
        _check_regular(st, file_path)  # before fdopen, which refuses a directory with a bare OSError
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        if line == 1 and limit is None and st.st_size > max_bytes:
            raise _too_large(file_path, st.st_size, max_bytes, whole=True)
        try:
            offset = 0
            for _ in range(line - 1):
                while True:  # skip one line, at most _CHUNK bytes in memory
                    chunk = f.readline(_CHUNK)
                    offset += len(chunk)
                    if not chunk or chunk.endswith(b"\n"):
                        break
                if not chunk:
                    return ""  # the file has fewer lines
            parts: list[bytes] = []
            total = taken = 0
            while limit is None or taken < limit:
                chunk = f.readline(max_bytes + 1 - total)
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise _too_large(file_path, total, max_bytes, whole=False)
                if chunk.endswith(b"\n"):
                    taken += 1
        except OSError as exc:
            raise _os_error(exc, file_path, "read") from None
    data = b"".join(parts)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = offset + exc.start
        detail = (
            f"{file_path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset {at} ({exc.reason}); "
            "fs/read_text_file reads UTF-8 text only"
        )
        raise FsError(
            INVALID_PARAMS,
            "File is not UTF-8 text",
            {"path": "$.path", "filePath": file_path, "offset": at, "detail": detail},
        ) from None


# -- writing ---------------------------------------------------------------------------------------
def _old_text(resolved: Path, max_bytes: int) -> str | None:
    try:
        with open(resolved, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write_atomic(
    file_path: str, roots: Sequence[str], data: bytes, want_old: bool, max_bytes: int
) -> tuple[Path, str | None]:
    resolved = _resolve(file_path, roots, "$.path")
    parent = resolved.parent
    try:
        st: os.stat_result | None = os.stat(resolved)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise InvalidPath(f"a parent of {file_path} is a file, not a directory", file_path) from None
    except OSError as exc:
        raise _os_error(exc, file_path, "write") from None
    if st is not None:
        _check_regular(st, file_path)
    old = _old_text(resolved, max_bytes) if want_old and st is not None else None
    try:
        if st is None:
            os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidPath(f"a parent of {file_path} is a file, not a directory", file_path) from None
    except OSError as exc:
        raise _os_error(exc, file_path, "write") from None
    if os.path.realpath(parent) != str(parent):  # a directory was swapped for a symlink meanwhile
        raise PathOutsideRoots(file_path, os.path.realpath(parent), roots)
    # tempfile.mkstemp creates 0o600; a new file must get 0o666 minus the umask (and the directory's
    # default ACL), which only the kernel applies race-free: so O_CREAT|O_EXCL with mode 0o666 here
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    mode = 0o666 if st is None else 0o600
    while True:
        temp = parent / f".{resolved.name[:_NAME_KEEP]}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        try:
            fd = os.open(temp, flags, mode)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise _os_error(exc, file_path, "write") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if st is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
                own = os.fstat(f.fileno())
                if (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid):
                    with contextlib.suppress(OSError):  # only privileged processes / group members may
                        os.fchown(f.fileno(), st.st_uid, st.st_gid)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, resolved)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise _os_error(exc, file_path, "write") from None
        raise
    with contextlib.suppress(OSError):  # make the rename durable
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return resolved, old


# -- the handler -----------------------------------------------------------------------------------
def _optional_int(value: Any) -> int | None:
    return None if value is UNSET or value is None else int(value)


class SessionFileSystem:
    """``fs/read_text_file`` and ``fs/write_text_file`` for the sessions of one client connection.

    ``sessions``: session id → :class:`~acp_trio.SessionInfo` (normally ``conn.sessions``); a
    request's paths must lie inside its session's :attr:`~acp_trio.SessionInfo.roots`.
    ``writable``: ``False`` answers every write -32601 (and :attr:`capabilities` says so).
    ``max_read_bytes``: most UTF-8 bytes one read answers with (default :data:`MAX_READ_BYTES`,
    16 MiB); ask for fewer lines beyond that.  ``read_overlay(path)``: called with the resolved
    :class:`~pathlib.Path` of an allowed read, in the event loop thread; return the editor's
    unsaved text for it (``line``/``limit`` are applied to it), or ``None`` to read the disk.
    ``on_write(path, old_text, new_text)``: called in the event loop thread after a write replaced
    the file at the resolved ``path``; ``old_text`` is the previous UTF-8 text, ``None`` when the
    file was new, not UTF-8 or over ``max_read_bytes``.  An exception from it is logged, the
    write still succeeds.  File I/O runs in worker threads (``trio.to_thread``).

    Raises :class:`FsError` and its subclasses (see the module docstring).  Source:
    ``docs/protocol/v1/file-system.mdx``.
    """

    def __init__(
        self,
        sessions: Mapping[str, SessionInfo],
        *,
        writable: bool = True,
        max_read_bytes: int = MAX_READ_BYTES,
        on_write: Callable[[Path, str | None, str], object] | None = None,
        read_overlay: Callable[[Path], str | None] | None = None,
    ) -> None:
        if max_read_bytes < 1:
            raise ValueError(f"max_read_bytes must be at least 1, got {max_read_bytes!r}")
        self.sessions = sessions
        self.writable = writable
        self.max_read_bytes = max_read_bytes
        self.on_write = on_write
        self.read_overlay = read_overlay

    @property
    def capabilities(self) -> v1.FileSystemCapabilities:
        """What to advertise as ``clientCapabilities.fs`` in ``initialize``."""
        return v1.FileSystemCapabilities(read_text_file=True, write_text_file=self.writable)

    def roots(self, session_id: str) -> tuple[str, ...]:
        """The directories session ``session_id`` may use (``cwd`` first).  Raises :class:`FsError` (-32002)."""
        info = self.sessions.get(session_id)
        if info is None:
            detail = f"no open session {session_id!r} on this connection"
            data = {"path": "$.sessionId", "sessionId": session_id, "detail": detail}
            raise FsError(RESOURCE_NOT_FOUND, "Session not found", data)
        return info.roots

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        """Answer ``fs/read_text_file``: the UTF-8 text of lines ``line`` (1-based, default 1) to
        ``line + limit - 1`` (default: to the end) of ``params.path``, endings kept; ``""`` when
        ``line`` is past the end.  Raises :class:`FsError` (see the module docstring)."""
        roots = self.roots(params.session_id)
        line = _optional_int(params.line)
        limit = _optional_int(params.limit)
        if line is not None and line < 1:
            detail = f"line is 1-based: the first line is 1, got {line}"
            raise FsError(INVALID_PARAMS, "Invalid params", {"path": "$.line", "detail": detail})
        if limit is not None and limit < 0:
            detail = f"limit is a number of lines (0 or more), got {limit}"
            raise FsError(INVALID_PARAMS, "Invalid params", {"path": "$.limit", "detail": detail})
        start = line or 1
        resolved = await trio.to_thread.run_sync(_resolve, params.path, roots, "$.path")
        if self.read_overlay is not None:
            text = self.read_overlay(resolved)
            if text is not None:
                content = _slice_text(text, start, limit)
                size = len(content.encode("utf-8", "surrogatepass"))
                if size > self.max_read_bytes:
                    raise _too_large(params.path, size, self.max_read_bytes, whole=start == 1 and limit is None)
                return v1.ReadTextFileResponse(content=content)
        content = await trio.to_thread.run_sync(_read_window, resolved, params.path, start, limit, self.max_read_bytes)
        log.debug("read %s (lines from %d, limit %s): %d characters", resolved, start, limit, len(content))
        return v1.ReadTextFileResponse(content=content)

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        """Answer ``fs/write_text_file``: atomically replace (or create) ``params.path`` with
        ``params.content`` encoded as UTF-8.  Raises :class:`FsError` (see the module docstring)."""
        if not self.writable:
            detail = "this client does not write files (it does not advertise fs.writeTextFile)"
            raise FsError(METHOD_NOT_FOUND, "Method not found", {"method": "fs/write_text_file", "detail": detail})
        roots = self.roots(params.session_id)
        try:
            data = params.content.encode("utf-8")
        except UnicodeEncodeError as exc:
            detail = f"content is not encodable as UTF-8 at character {exc.start} ({exc.reason})"
            raise FsError(
                INVALID_PARAMS, "Invalid params", {"path": "$.content", "offset": exc.start, "detail": detail}
            ) from None
        resolved, old = await trio.to_thread.run_sync(
            _write_atomic, params.path, roots, data, self.on_write is not None, self.max_read_bytes
        )
        log.debug("wrote %s: %d bytes", resolved, len(data))
        if self.on_write is not None:
            try:
                self.on_write(resolved, old, params.content)
            except Exception:
                log.exception("on_write callback %r raised for %s", self.on_write, resolved)
        return v1.WriteTextFileResponse()


__all__ = [
    "MAX_READ_BYTES",
    "FsError",
    "FsNotFound",
    "InvalidPath",
    "PathOutsideRoots",
    "SessionFileSystem",
    "resolve_in_roots",
]
