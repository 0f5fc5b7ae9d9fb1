"""Removing and measuring a job's files whatever it did to them (stdlib only; the server, the
checker's guard and the parent use it).

A job may leave directories it made unreadable (``chmod 000``), trees deeper than Python's
recursion limit or longer than ``PATH_MAX``. ``shutil.rmtree`` gives up on the first (quietly,
with ``ignore_errors``) and raises ``RecursionError`` on the second. Here: one directory fd at a
time, names relative to it, an explicit stack, permissions restored before a directory is read,
bottom-up ``rmdir``. Nothing raises; the answer says whether the folder is really empty/gone.
Call it only once every process of the job is dead (nothing else changes the tree meanwhile).
"""

from __future__ import annotations

import os

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _scan(fd: int) -> list[str]:
    """Unlink every non-directory in the directory ``fd``; return its subdirectories' names."""
    subdirs = []
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError:
        return []
    for e in entries:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(e.name)
            continue
        try:
            os.unlink(e.name, dir_fd=fd)
        except OSError:
            pass
    return subdirs


def _clear(fd: int) -> None:
    """Remove everything below the directory ``fd`` (which stays open and is closed here)."""
    stack: list[tuple[str, list[str]]] = [("", _scan(fd))]
    try:
        while stack:
            pending = stack[-1][1]
            if pending:
                name = pending.pop()
                try:
                    os.chmod(name, 0o700, dir_fd=fd)
                    child = os.open(name, _DIR, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                stack.append((name, _scan(fd)))
                continue
            name, _ = stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = parent
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _measure(fd: int) -> tuple[int, list[str], int]:
    """Bytes of the directory ``fd``'s entries (blocks, not lengths), its subdirectories' names,
    and how many entries it has."""
    total, subdirs = 0, []
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        total += st.st_blocks * 512
        if e.is_dir(follow_symlinks=False):
            subdirs.append(e.name)
    return total, subdirs, len(entries)


def disk_usage(path: str, max_entries: int = 200_000) -> tuple[int, bool]:
    """``(bytes, complete)``: the blocks of everything below ``path``, measured as ``_clear``
    walks (one directory fd, names relative to it, an explicit stack: any depth, any path
    length, no recursion). ``complete`` is False when a directory could not be read (``chmod
    000``), the tree changed under the walk, or it has more than ``max_entries`` entries: the
    caller must then assume the worst. Never raises. The job may still be running."""
    try:
        fd = os.open(path, _DIR)
    except OSError:
        return 0, False
    total, complete, seen = 0, True, 0
    try:
        size, subdirs, n = _measure(fd)
        total, seen, stack = size, n, [subdirs]
        while stack and seen <= max_entries:
            if stack[-1]:
                try:
                    child = os.open(stack[-1].pop(), _DIR, dir_fd=fd)
                except OSError:
                    complete = False
                    continue
                try:
                    size, subdirs, n = _measure(child)
                except OSError:
                    os.close(child)
                    complete = False
                    continue
                os.close(fd)
                fd = child
                total, seen = total + size, seen + n
                stack.append(subdirs)
                continue
            stack.pop()
            if stack:
                parent = os.open("..", _DIR, dir_fd=fd)
                os.close(fd)
                fd = parent
        if stack:
            complete = False
    except OSError:
        complete = False
    finally:
        os.close(fd)
    return total, complete


def empty_dir(path: str) -> bool:
    """Remove everything inside ``path`` (kept, mode 0700); True when it is empty afterwards."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            return False
        os.chmod(path, 0o700)
        for _ in range(3):  # a second pass for what a failed chmod or open skipped
            _clear(os.open(path, _DIR))
            if not os.listdir(path):
                return True
        return False
    except (OSError, RecursionError):
        return False


def remove_tree(path: str) -> bool:
    """Remove ``path`` and everything below it; True when nothing of it is left."""
    try:
        if not os.path.lexists(path):
            return True
        if os.path.isdir(path) and not os.path.islink(path):
            empty_dir(path)
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass
    return not os.path.lexists(path)
