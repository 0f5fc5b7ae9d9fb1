"""One writer per output folder: an exclusive ``flock`` on ``<folder>/.lock``, held for the run.

``rewardlab train`` (its run directory) and ``rewardlab eval`` (its ``--output``) hold this lock
while they write, so a second process pointed at the same folder stops at once with a one-line
error instead of interleaving checkpoints, metrics or samples with the first::

    from rewardlab.locks import FolderLock
    with FolderLock("runs/x", "training run"):
        ...                                  # nobody else writes runs/x meanwhile

The lock belongs to the open file, so the kernel drops it when the process ends in any way
(SIGKILL included): there is never a stale lock to delete by hand, and the ``.lock`` file that
stays behind is harmless (it only records the last holder's pid for the error message). A lock
taken on a folder that did not exist yet, by a run that then fails before writing anything,
removes the folder again, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Any

from rewardlab.errors import RewardlabError

LOCK_NAME = ".lock"

__all__ = ["LOCK_NAME", "FolderLock", "FolderLocked"]


class FolderLocked(RewardlabError):
    """Another live process holds the folder's lock."""


class FolderLock:
    """Create ``folder`` if needed and hold its lock until :meth:`release` (or process exit).

    ``what`` names the holder in the error message ("training run", "eval"); ``hint`` says what
    to do instead (default: wait, or choose another folder).
    """

    def __init__(self, folder: str | os.PathLike, what: str = "run", *, hint: str | None = None) -> None:
        self.folder = Path(folder)
        self.what = what
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None
        self._made: list[Path] = []  # folders this lock created, deepest first
        self._acquire(hint)

    def _acquire(self, hint: str | None) -> None:
        if self.folder.exists() and not self.folder.is_dir():
            raise RewardlabError(f"{self.folder} is a file, not a folder; choose another output folder")
        for _ in range(5):  # a failed start of another process may remove a folder it had just created
            made = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise RewardlabError(f"cannot create {self.path}: {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _read_holder(fd)
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RewardlabError(f"cannot lock {self.path}: {e.strerror}") from None
                by = f" (pid {holder})" if holder else ""
                raise FolderLocked(
                    f"{self.folder} is in use by another {self.what}{by}; "
                    + (hint or "wait for it to finish, or choose another output folder")
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file between our open and our lock: take the new one
        else:
            raise RewardlabError(f"cannot lock {self.path}: the folder keeps disappearing")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd, self._made = fd, made

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, failed: bool = False) -> None:
        """Drop the lock. With ``failed=True`` a folder this lock created, still empty but for the
        lock file, is removed (a run that failed before writing anything leaves no folder behind)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if failed and self._made and {p.name for p in self.folder.iterdir()} == {LOCK_NAME}:
                self.path.unlink(missing_ok=True)
                for folder in self._made:  # rmdir only removes empty folders: stop at the first in use
                    folder.rmdir()
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the file releases the flock

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.release(failed=exc_type is not None)

    def __del__(self) -> None:  # an exception path that never reached release(): the fd still closes
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None
