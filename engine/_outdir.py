"""Output folders written safely: every file the engine writes into one is created here.

Four rules hold for every command and every file:

* **No write follows a link out of the output folder.** Before a file is written, each
  entry between the output folder and it (``OUT/baseline``, then
  ``OUT/baseline/summary.json``) is checked: a symbolic link whose target lies outside
  the output folder's real path is refused in one line (:class:`~quiver._errors.OutputError`,
  exit 2); a link that stays inside is followed. The output folder itself may be a link
  the user made (to a bigger disk, say). Files are then opened with ``O_NOFOLLOW`` (a
  link planted after the check is refused too); a whole file is written to a temporary
  file beside it, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, and moved into place
  (:func:`write_text`), so that a reader or a killed run finds the old file or the new
  one, never a prefix. SQLite follows links itself: a database whose file or side files
  (``-wal``, ``-shm``, ``-journal``) are links is refused (:func:`check_database`). The
  output folder of a path is the one a command holds (:class:`OutputFolder`) that
  contains it; outside any, the folder the file is written into.
* **One command at a time** (:class:`OutputFolder`): an exclusive ``flock`` on
  ``OUT/.quiver.lock`` (which names its holder: PID, command, start time), held for
  the whole command and released by the operating system when the process ends, SIGKILL
  included: a crash leaves no lock that blocks.
* **No clobbering** (:func:`check_owner`): a command writes into a new or empty folder,
  or into one holding its own earlier output, marked by :data:`MARKER_FILE` (the command
  and the version), or, written before folders were marked, recognised by its tell-tale
  files. A folder holding files no command wrote, or another command's output, is
  refused in one line naming what it holds.
* **A disk that refuses a write** (full, over quota, read-only, failing) is one
  :class:`~quiver._errors.OutputError` naming the file and the system's reason; the
  command adds what it kept and how to go on where it catches it (:func:`output_errors`).
"""

from __future__ import annotations

import contextlib
import errno as errnos
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from io import TextIOWrapper
from pathlib import Path

from quiver._errors import OutputError

try:
    import fcntl
except ImportError:  # not a POSIX system: folders are not locked
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("quiver.outdir")

__all__ = ["LOCK_FILE", "MARKER_FILE", "WRITE_ERRNOS", "LogFile", "OutputFile", "OutputFolder", "check_database",
           "check_owner", "make_folder", "mark_folder", "open_output", "output_errors", "real_path", "replace",
           "write_bytes", "write_error", "write_text"]

LOCK_FILE = ".quiver.lock"
"""In an output folder while a command writes it: the lock, naming its holder."""
MARKER_FILE = ".quiver-output"
"""In an output folder: the command that writes it, and the version that marked it."""
WRITE_ERRNOS = frozenset({errnos.ENOSPC, errnos.EDQUOT, errnos.EFBIG, errnos.EROFS, errnos.EACCES, errnos.EPERM,
                          errnos.EIO})
"""The system's refusals of a write that a command reports in one line, with the way out."""
_FULL = frozenset({errnos.ENOSPC, errnos.EDQUOT, errnos.EFBIG})
_CLOSED = frozenset({errnos.EROFS, errnos.EACCES, errnos.EPERM})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_WRITE = os.O_WRONLY | _NOFOLLOW
_UNLOCKABLE = frozenset({errnos.ENOLCK, errnos.EOPNOTSUPP, errnos.ENOSYS})
"""``flock`` refused by the file system itself (some network file systems): the command
goes on unlocked, and says so."""
_SIDES = ("-wal", "-shm", "-journal")

# --------------------------------------------------------------------------- where a write lands

_held: dict[str, int] = {}
"""The output folders commands of this process hold (absolute and real paths), counted."""
_held_lock = threading.Lock()


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _root_of(path: str, folder: bool) -> str:
    """The output folder a write to the absolute ``path`` goes into: the innermost one held
    that contains it, else the folder it is written into (``path`` itself for a folder)."""
    with _held_lock:
        roots = [root for root in _held if _inside(path, root)]
    return max(roots, key=len) if roots else path if folder else os.path.dirname(path)


def _link_refused(shown: Path | str, target: str) -> OutputError:
    return OutputError(f"{shown} is a symbolic link (to {target}): the engine does not write through links that "
                       "leave the output folder; remove the link, or give another output folder", path=str(shown))


def real_path(path: str | os.PathLike[str], *, folder: bool = False) -> str:
    """Where a write to ``path`` (a file, or with ``folder`` a folder) lands: its real
    path, once no entry between its output folder and it is a link that leaves that folder.

    Raises:
        OutputError: One of them is such a link; the message names it and its target.
    """
    shown = Path(path)
    full = os.path.abspath(shown)
    root = _root_of(full, folder)
    real_root = os.path.realpath(root)
    rel = os.path.relpath(full, root)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    current = root
    for k, part in enumerate(parts):
        current = os.path.join(current, part)
        if os.path.islink(current) and not _inside(target := os.path.realpath(current), real_root):
            below = len(parts) - 1 - k  # the entries under the link, left out of the name shown
            named = Path(*shown.parts[:len(shown.parts) - below]) if 0 < below < len(shown.parts) else current
            raise _link_refused(shown if below == 0 else named, target)
    return os.path.realpath(full)


def write_error(exc: OSError, path: str | os.PathLike[str], doing: str = "write") -> OutputError:
    """``exc``, met writing ``path``, as one error naming the file and the system's reason."""
    if exc.errno == errnos.ELOOP:  # O_NOFOLLOW met a link planted after the check
        return OutputError(f"{path} is a symbolic link: the engine does not write through links; remove the link, "
                           "or give another output folder", path=str(path))
    return OutputError(f"cannot {doing} {path}: {exc.strerror or type(exc).__name__}", path=str(path),
                       errno=exc.errno)


# --------------------------------------------------------------------------- files


class OutputFile:
    """A file of an output folder open for writing (:func:`open_output`): bytes, or text
    written as UTF-8. A write the disk refuses raises an :class:`OutputError` naming the
    file; closing the file after that does not report it a second time.

    Attributes:
        path: The file, as it was named.
        name: The same, as a string (``gzip`` names the compressed file after it).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.name = str(path)
        self._fh = os.fdopen(fd, "wb")
        self._failed = False

    @contextlib.contextmanager
    def _refusals(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            self._failed = True
            raise write_error(exc, self.path) from None

    def write(self, data: bytes | str) -> int:
        """Write ``data`` (text as UTF-8); the number of bytes written."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        with self._refusals():
            return self._fh.write(raw)

    def flush(self) -> None:
        with self._refusals():
            self._fh.flush()

    def sync(self) -> None:
        """Flush, then ``fsync``: what was written survives a crash of the machine."""
        with self._refusals():
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as exc:
            if not self._failed:
                raise write_error(exc, self.path) from None

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_output(path: str | os.PathLike[str], *, append: bool = False) -> OutputFile:
    """``path`` opened for writing (truncated, or appended to), never through a link.

    Raises:
        OutputError: A link leaves the output folder, or the system refused to open it.
    """
    shown = Path(path)
    flags = _WRITE | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(real_path(shown), flags, 0o666)
    except OSError as exc:
        raise write_error(exc, shown) from None
    return OutputFile(shown, fd)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = False) -> Path:
    """Write ``path`` whole or not at all: ``data`` goes to ``PATH.tmp`` (made anew: what a
    killed run left there is removed, a link included, never followed), then replaces
    ``path``; with ``fsync``, it reaches the disk first. Returns ``path``.

    Raises:
        OutputError: A link leaves the output folder, or the disk refused the write
            (the temporary file is removed).
    """
    shown = Path(path)
    target = real_path(shown)
    tmp, made = target + ".tmp", False
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, _WRITE | os.O_CREAT | os.O_EXCL, 0o666)
        made = True
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        if made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise write_error(exc, shown) from None
    return shown


def write_text(path: str | os.PathLike[str], text: str, *, fsync: bool = False) -> Path:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"), fsync=fsync)


def replace(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Move the finished file ``source`` onto ``path`` (both in one output folder).

    Raises:
        OutputError: A link on the way to ``path`` leaves the output folder, or the
            system refused the move.
    """
    shown = Path(path)
    try:
        os.replace(source, real_path(shown))
    except OSError as exc:
        raise write_error(exc, shown) from None


def make_folder(path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path`` and those above it, never through a link that leaves
    the output folder. Returns ``path``."""
    shown = Path(path)
    try:
        os.makedirs(real_path(shown, folder=True), exist_ok=True)
    except OSError as exc:
        raise write_error(exc, shown, "create the folder") from None
    return shown


def check_database(path: str | os.PathLike[str]) -> Path:
    """Refuse a SQLite database of an output folder that SQLite would open through a
    link: the file or its ``-wal``, ``-shm`` or ``-journal`` is one (or a folder on the
    way leaves the output folder). Returns ``path``.

    Raises:
        OutputError: The link named, and the way out.
    """
    shown = Path(path)
    real_path(shown)
    for side in (str(shown), *(f"{shown}{suffix}" for suffix in _SIDES)):
        if os.path.islink(side):
            raise OutputError(f"{side} is a symbolic link (to {os.path.realpath(side)}): the engine does not open "
                              "databases through links; remove the link, or give another output folder", path=side)
    return shown


class LogFile(logging.FileHandler):
    """The log file of an output folder, appended to, opened as every output file is (no
    link followed; a link that leaves the folder is refused when the handler is made).
    A record the disk refuses (full, read-only) is dropped without a word: the files the
    command writes report the disk in one line, where a log's failure would print a
    traceback per record.

    Args:
        path: The log file.
        delay: Open it at the first record.
    """

    def __init__(self, path: str | os.PathLike[str], *, delay: bool = False) -> None:
        self._shown = Path(path)
        real_path(self._shown)
        try:
            super().__init__(path, mode="a", encoding="utf-8", delay=delay)
        except OSError as exc:
            raise write_error(exc, self._shown) from None

    def _open(self) -> TextIOWrapper:
        fd = os.open(real_path(self._shown), _WRITE | os.O_CREAT | os.O_APPEND, 0o666)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def handleError(self, record: logging.LogRecord) -> None:
        if not isinstance(sys.exc_info()[1], OSError | OutputError):
            super().handleError(record)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()


# --------------------------------------------------------------------------- who writes a folder


def _marker(folder: Path) -> str | None:
    """The command :data:`MARKER_FILE` names, if the folder has a readable one."""
    try:
        command = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))["command"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return command if isinstance(command, str) else None


def mark_folder(folder: str | os.PathLike[str], command: str) -> None:
    """Mark ``folder`` as ``command``'s output (when it is not marked so already)."""
    from quiver import __version__

    if _marker(Path(folder)) != command:
        write_text(Path(folder) / MARKER_FILE, json.dumps({"command": command, "version": __version__}) + "\n")


def _recording(folder: Path) -> list[str]:
    return [name for name in ("traces.jsonl", "traces.jsonl.partial") if (folder / name).is_file()]


def _campaign_signs(folder: Path, names: set[str]) -> list[str]:
    found = sorted(names & {"ledger.sqlite", ".finished"})
    return found + (["campaign.json", "spec.resolved.json"] if {"campaign.json", "spec.resolved.json"} <= names
                    else [])


def _run_signs(folder: Path, names: set[str]) -> list[str]:
    return _campaign_signs(folder, names) or [f"baseline/{n}" for n in _recording(folder / "baseline")]


def _gate_signs(folder: Path, names: set[str]) -> list[str]:
    found = sorted(names & {"gate.json", "gate.md"})
    if found or _campaign_signs(folder, names):
        return found
    return [f"baseline/{n}" for n in _recording(folder / "baseline")]


def _replay_signs(folder: Path, names: set[str]) -> list[str]:
    found = sorted(names & {"replayed.jsonl", "check.json"})
    if found or not {"pairs.jsonl", "summary.json"} <= names:
        return found
    try:
        perturbed = "llm_calls_per_pair" in json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        perturbed = False
    return ["pairs.jsonl", "summary.json"] if perturbed else []


TELL_TALES: dict[str, Callable[[Path, set[str]], list[str]]] = {
    "run": _run_signs,
    "record": lambda folder, names: _recording(folder),
    "gate": _gate_signs,
    "attribute": lambda folder, names: sorted(names & {"attribution.json", "attribution.md"}),
    "replay": _replay_signs,
}
"""What each command's output holds, to recognise a folder written before folders were
marked (or by a command killed before it marked it): the files that say so, else none."""


def _some(names: list[str], shown: int = 4) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def check_owner(folder: str | os.PathLike[str], command: str, flag: str = "--output") -> None:
    """Refuse ``folder`` unless ``command`` may write into it: it does not exist, is empty,
    or holds ``command``'s own earlier output (marked, or recognised by its tell-tale
    files). Writes nothing.

    Raises:
        OutputError: One line naming what the folder holds (another command's output,
            or files no command wrote) and ``flag``, the way out.
    """
    path = Path(folder)
    if not os.path.lexists(path):
        return
    if not path.is_dir():
        raise OutputError(f"{path} is a file, not a folder: give a folder as {flag}", path=str(path))
    try:
        names = set(os.listdir(path)) - {LOCK_FILE, MARKER_FILE}
    except OSError as exc:
        raise write_error(exc, path, "read the folder") from None
    owner = _marker(path)
    if owner == command or (owner is None and not names):
        return
    found = {name: signs for name, tell in TELL_TALES.items() if (signs := tell(path, names))}
    if owner is None and command in found:
        return
    other = owner or next(iter(found), None)
    if other is not None:
        raise OutputError(f"{path} holds the output of quiver {other} ({_some(found.get(other) or [MARKER_FILE])}): "
                          f"quiver {command} does not write into another command's folder; give another {flag}",
                          path=str(path))
    raise OutputError(f"{path} holds files quiver did not write ({_some(sorted(names))}): quiver {command} writes "
                      f"only into a new or empty folder, or into its own earlier output; give another {flag}",
                      path=str(path))


# --------------------------------------------------------------------------- one writer at a time


def _in_use(folder: Path, lock: str, flag: str) -> OutputError:
    """The error of a folder whose lock another process holds, naming it when it says."""
    try:
        held = json.loads(Path(lock).read_text(encoding="utf-8"))
        since = time.strftime("%H:%M:%S", time.localtime(float(held["since"])))
        if time.localtime(float(held["since"]))[:3] != time.localtime()[:3]:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held["since"])))
        holder = f"{held['command']} (PID {int(held['pid'])}, since {since})"
    except (OSError, ValueError, KeyError, TypeError):
        holder = "another quiver command"
    return OutputError(f"{folder} is in use by {holder}; wait for it to finish or give another {flag}",
                       path=str(folder))


def _probe(folder: Path, flag: str) -> None:
    """Raise :func:`_in_use` when another process holds the folder's lock (writes nothing)."""
    lock = str(folder / LOCK_FILE)
    if fcntl is None:
        return
    try:
        fd = os.open(lock, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return  # no lock file, or none this process can read: taking the lock will tell
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(folder, lock, flag) from None
    except OSError:
        pass
    finally:
        os.close(fd)


def _lock(folder: Path, command: str, flag: str) -> int:
    """Take the folder's lock and say who holds it; the lock file's descriptor."""
    lock = folder / LOCK_FILE
    target = real_path(lock)
    while True:
        try:
            fd = os.open(target, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
        except OSError as exc:
            raise write_error(exc, folder, "write into") from None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _in_use(folder, target, flag) from None
        except OSError as exc:
            if exc.errno not in _UNLOCKABLE:
                os.close(fd)
                raise write_error(exc, lock, "lock") from None
            log.warning("%s cannot be locked (%s): another command writing into the folder meanwhile would not be "
                        "stopped", lock, exc.strerror)
        held, now = os.fstat(fd), _stat(target)
        if now is not None and (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            break
        os.close(fd)  # its holder removed it after this process opened it: lock the one there now
    holder = {"pid": os.getpid(), "command": f"quiver {command}", "since": time.time()}
    try:
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))
    except OSError as exc:
        os.close(fd)
        raise write_error(exc, lock) from None
    return fd


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def _hold(path: Path) -> list[str]:
    roots = sorted({os.path.abspath(path), os.path.realpath(path)})
    with _held_lock:
        for root in roots:
            _held[root] = _held.get(root, 0) + 1
    return roots


def _let_go(roots: list[str]) -> None:
    with _held_lock:
        for root in roots:
            _held[root] -= 1
            if not _held[root]:
                del _held[root]


class OutputFolder:
    """An output folder held by one command while it runs (``with OutputFolder(...)``).

    Entering refuses a folder another process holds (naming it) or that the command may
    not write into (:func:`check_owner`), creates it, and takes its lock; leaving
    releases the lock (the system releases it also when the process dies), and removes
    the lock file, and the folder when entering made it and nothing was written into it.
    While held, the folder is the output folder of every path inside it (:func:`real_path`).

    Args:
        path: The folder.
        command: The command that writes it (``"run"``), as messages name it.
        flag: The option that gives another folder, as messages name it.
    """

    def __init__(self, path: str | os.PathLike[str], command: str, *, flag: str = "--output") -> None:
        self.path = Path(path)
        self.command = command
        self.flag = flag
        self._fd: int | None = None
        self._roots: list[str] = []
        self._made = False
        self._was_marked = False

    def __enter__(self) -> OutputFolder:
        _probe(self.path, self.flag)
        check_owner(self.path, self.command, self.flag)
        self._made = not os.path.lexists(self.path)
        self._was_marked = os.path.lexists(self.path / MARKER_FILE)
        self._roots = _hold(self.path)
        try:
            make_folder(self.path)
            self._fd = _lock(self.path, self.command, self.flag)
        except BaseException:
            self._leave()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._leave()

    def _leave(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):  # removed while held: a process that opened it retries
                os.unlink(self.path / LOCK_FILE)
            os.close(self._fd)
            self._fd = None
        _let_go(self._roots)
        self._roots = []
        with contextlib.suppress(OSError):
            if not self._was_marked and os.listdir(self.path) == [MARKER_FILE]:
                os.unlink(self.path / MARKER_FILE)  # marked, then nothing written after all
            if self._made:
                os.rmdir(self.path)  # only when empty: the command wrote nothing


# --------------------------------------------------------------------------- the way out


def _fix(code: int | None, folder: Path) -> str:
    if code in _FULL:
        return "free space"
    if code in _CLOSED:
        return f"make {folder} writable"
    return "check the disk"


@contextlib.contextmanager
def output_errors(folder: str | os.PathLike[str], kept: str, then: str) -> Iterator[None]:
    """Within the block, a write the system refused (:data:`WRITE_ERRNOS`) ends the
    command in one :class:`OutputError`: the file, the reason, what was kept, and what to
    do (``then``: ``run `quiver run SPEC --resume```), e.g. ``cannot write
    runs/x/ledger.sqlite: No space left on device; everything committed so far is kept:
    free space and run `quiver run SPEC --resume```.

    Args:
        folder: The command's output folder.
        kept: What the command kept (``everything committed so far is kept``).
        then: What to do once the disk takes writes again.
    """
    out = Path(folder)
    try:
        yield
    except OutputError as exc:
        if exc.errno is None or exc.way_out is not None:
            raise
        raise exc.with_way_out(f"{kept}: {_fix(exc.errno, out)} and {then}") from None
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS or (exc.errno in _CLOSED and not _ours(exc.filename, out)):
            raise
        error = write_error(exc, exc.filename if exc.filename is not None else out)
        raise error.with_way_out(f"{kept}: {_fix(exc.errno, out)} and {then}") from None


def _ours(filename: object, folder: Path) -> bool:
    """Whether an error's file is the folder's (or unnamed: a write to an open file)."""
    if filename is None:
        return True
    path = os.path.abspath(os.fsdecode(filename)) if isinstance(filename, str | bytes) else ""
    return any(_inside(path, root) for root in (os.path.abspath(folder), os.path.realpath(folder)))
