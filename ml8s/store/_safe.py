"""The local backend's defensive file operations: reads that cannot hang or exhaust memory, deletions
that never leave the store through a symbolic link, and a walk that names what is no regular file.

Whoever can write the store's directory can put anything in it: a FIFO (an ``open`` for reading blocks
until a writer comes, forever), a link to ``/dev/zero`` (a read that never ends), a sparse 64 GiB file
(a read that ends in MemoryError), a link from a directory the store owns to one it does not (a
deletion that lands outside). So:

- every read opens with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer) and
  checks ``fstat`` says regular file before reading a byte; a *strict* read (``max_bytes`` given) also
  opens with ``O_NOFOLLOW`` and refuses a file larger than ``max_bytes`` before reading it, and reads at
  most ``max_bytes + 1`` bytes (a file growing meanwhile is refused too);
- a deletion walks from the root one directory at a time with ``O_NOFOLLOW | O_DIRECTORY`` and unlinks
  relative to the last directory opened: a symbolic link anywhere on the way stops it (unlink itself
  never follows its last component), so a swapped-in link cannot redirect it;
- ``irregular`` lists, with ``lstat`` (nothing followed), every entry under a prefix that is neither a
  regular file nor a directory, and the prefix's own components when one of them is a link.
"""

from __future__ import annotations

import errno
import os
import stat

from ml8s.errors import NotFoundError, ObjectTooLargeError, StoreError, UnsafeObjectError

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024


def kind(mode: int) -> str:
    """What a non-regular entry is, in the words an operator would use."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "no regular file"


def open_regular(path: str, uri: str, *, nofollow: bool, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file at ``path`` (relative to ``dir_fd`` if given); NotFoundError,
    UnsafeObjectError or StoreError otherwise."""
    try:
        fd = os.open(path, _READ_FLAGS | (os.O_NOFOLLOW if nofollow else 0), dir_fd=dir_fd)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{uri} does not exist") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP and nofollow:
            raise UnsafeObjectError(
                f"cannot read {uri}: a symbolic link; expected a regular file (not followed)"
            ) from exc
        raise StoreError(f"cannot read {uri}: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeObjectError(f"cannot read {uri}: {kind(info.st_mode)}; expected a regular file (not read)")
    return fd


def read_regular(path: str, uri: str, *, max_bytes: int | None, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` if given; module docstring); a strict read
    when ``max_bytes`` is given."""
    fd = open_regular(path, uri, nofollow=max_bytes is not None, dir_fd=dir_fd)
    try:
        size = os.fstat(fd).st_size
        if max_bytes is not None and size > max_bytes:
            raise ObjectTooLargeError(f"{uri} holds {size} bytes; expected at most {max_bytes} (not read)")
        limit = size if max_bytes is None else max_bytes
        chunks: list[bytes] = []
        read = 0
        # A regular file is finite, but may grow while we read: never more than the bound (+1, to notice).
        while read <= limit and (chunk := os.read(fd, min(_CHUNK, limit + 1 - read))):
            chunks.append(chunk)
            read += len(chunk)
        if max_bytes is not None and read > max_bytes:
            raise ObjectTooLargeError(f"{uri} grew past {max_bytes} bytes while read; expected at most that")
        return b"".join(chunks)
    except OSError as exc:
        raise StoreError(f"cannot read {uri}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def unlink_nofollow(root: str, parts: list[str], uri: str) -> None:
    """Unlink ``root/parts...`` without following a link on the way, then remove the directories this left
    empty (never ``root``) and fsync the deepest one left. A missing file is no error."""
    try:
        fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    except FileNotFoundError:  # no root, no file: deleting it is done
        return
    try:
        for index, part in enumerate(parts[:-1]):
            try:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join(parts[: index + 1])
                    raise UnsafeObjectError(
                        f"cannot delete {uri}: {where} is no directory (a symbolic link?); nothing followed or deleted"
                    ) from exc
                raise StoreError(f"cannot delete {uri}: {exc.strerror or exc}") from exc
        try:
            os.unlink(parts[-1], dir_fd=fds[-1])
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot delete {uri}: {exc.strerror or exc}") from exc
        depth = len(parts) - 1
        while depth > 0:
            try:
                os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
            except OSError:  # not empty, already gone, or not ours to tidy: stop
                break
            depth -= 1
        os.fsync(fds[depth])
    finally:
        for fd in fds:
            os.close(fd)


def irregular(root: str, parts: list[str]) -> list[str]:
    """Keys (relative to ``root``) of entries under ``parts`` that are neither regular files nor
    directories, including a component of ``parts`` itself; sorted. Nothing is followed."""
    found: list[str] = []
    path = root
    for index, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: the root itself is no directory
            return []
        if stat.S_ISREG(mode) and index == len(parts) - 1:
            return []
        if not stat.S_ISDIR(mode):
            return ["/".join(parts[: index + 1])]
    pending = [(path, "/".join(parts))]
    while pending:
        directory, under = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    key = f"{under}/{entry.name}" if under else entry.name
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(mode):
                        pending.append((entry.path, key))
                    elif not stat.S_ISREG(mode):
                        found.append(key)
        except (FileNotFoundError, NotADirectoryError):
            continue
    return sorted(found)
