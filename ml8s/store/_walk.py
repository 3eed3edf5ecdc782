"""The local store's listing: a directory walk and one ``stat`` per file, no file read, nothing followed."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from ml8s.errors import StoreError
from ml8s.store.base import ObjectInfo


def walk(base: str, rel: str, *, skip: str, uri: Callable[[str], str]) -> list[ObjectInfo]:
    """Regular files under ``base`` (the key ``rel``, "" for the root), keyed under ``rel`` and sorted by key;
    directories named ``skip`` are not entered, links to directories neither listed nor followed, and files that
    vanish meanwhile are left out. ``uri`` names a key in errors."""
    if rel:
        try:
            info = os.stat(base)
        except OSError as exc:
            if _no_file(exc):
                return []
            raise StoreError(f"cannot list {uri(rel)}: {exc.strerror or exc}") from exc
        if stat.S_ISREG(info.st_mode):
            return [ObjectInfo(key=rel, size=info.st_size, mtime=info.st_mtime, changed=changed(info))]
    found: list[ObjectInfo] = []
    pending = [(base, rel)]
    while pending:
        directory, under = pending.pop()
        try:
            _scan(directory, under, skip, found, pending)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed while we walked (a delete prunes empty directories)
        except OSError as exc:
            raise StoreError(f"cannot list {uri(under)}: {exc.strerror or exc}") from exc
    return sorted(found, key=lambda item: item.key)


def _scan(directory: str, under: str, skip: str, found: list[ObjectInfo], pending: list[tuple[str, str]]) -> None:
    """One directory of :func:`walk`: regular files into ``found``, subdirectories onto ``pending``."""
    with os.scandir(directory) as entries:
        for entry in entries:
            key = f"{under}/{entry.name}" if under else entry.name
            try:
                if entry.is_dir():  # like os.walk: a link to a directory is neither listed nor followed
                    if entry.name != skip and not entry.is_symlink():
                        pending.append((entry.path, key))
                    continue
                info = entry.stat()
            except OSError as exc:  # deleted since the directory was read, or a dangling or looping link
                if not _no_file(exc):
                    raise
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(ObjectInfo(key=key, size=info.st_size, mtime=info.st_mtime, changed=changed(info)))


def link(path: str, key: str, *, uri: Callable[[str], str]) -> ObjectInfo | None:
    """The symbolic link at ``path`` (the key ``key``) itself, from ``lstat``: its own size and times, which a
    listing (``stat``, through the link) gives as its target's; None when no link is there (gone, or replaced)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        if _no_file(exc):
            return None
        raise StoreError(f"cannot read {uri(key)}: {exc.strerror or exc}") from exc
    if not stat.S_ISLNK(info.st_mode):
        return None
    return ObjectInfo(key=key, size=info.st_size, mtime=info.st_mtime, changed=changed(info))


def _no_file(exc: OSError) -> bool:
    """Whether a ``stat`` failed because there is no file: gone, under a file, or a link that loops (``ln -s x
    x``, which failed the listing of the whole root) or dangles; nothing to list, nothing under it."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def changed(info: os.stat_result) -> float:
    """When the file last changed by the filesystem's clock: ``st_ctime`` cannot be set back by anyone
    (utime sets ``st_mtime`` and so moves ``st_ctime`` to now), so a backdated file does not look old."""
    return max(info.st_mtime, info.st_ctime)
