"""The local store's writes open their directories from the root one component at a time, never through a link.

A store writer who holds no key can still replace a directory of the store by a symbolic link (``.tmp`` of a
chain, ``model/`` of a run) to one outside it; a write that resolves ``root/a/b/key`` by its path would then land,
and stay, wherever the link points. So a write opens the root, then each directory below it with ``O_NOFOLLOW |
O_DIRECTORY`` relative to the one before (``mkdir(dir_fd=...)`` where one is missing), and creates, links, renames
and fsyncs relative to those descriptors: a link anywhere on the way is refused (UnsafeObjectError, nothing
written), and a directory swapped for a link after it was opened changes nothing, since the descriptor still
names the directory walked. One write's directories are opened once (a :class:`Tree` keeps them until it closes):
a tmp file and its key under one run share the run's descriptors, so a component costs one ``open`` and one
``close``. A concurrent ``delete`` may remove a directory we hold (it prunes empty ones): the step then fails with
ENOENT and the directories are walked again, as often as ``ATTEMPTS``.

Reads walk the same way (:func:`reading`, never creating a directory): a key's parent swapped for a link would
otherwise make ml8s read, hash, verify and serve a file from outside the store.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from ml8s.errors import NotFoundError, StoreError, UnsafeObjectError
from ml8s.store._safe import kind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ATTEMPTS = 20  # a directory removed under a writer by concurrent deletes is recreated this often
_T = TypeVar("_T")


class Tree:
    """Directories of the store at ``root`` opened for one write; close it (``with``) to close them."""

    def __init__(self, root: str, uri: Callable[[str], str], *, done: str = "written") -> None:
        self.root, self.uri, self.done = root, uri, done  # done: what a refusal says never happened
        self._fds: dict[tuple[str, ...], int] = {}

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def directory(self, parts: tuple[str, ...], doing: str, what: str, *, create: bool = True) -> int:
        """A descriptor of ``root/parts...`` (module docstring); FileNotFoundError when one is missing and not
        ``create``; UnsafeObjectError when one is a link or no directory: ``cannot {doing} under {component}``."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._walk(parts, doing, what, create)
            except FileNotFoundError:  # a concurrent delete removed one we had opened or just made
                if not create or attempt == ATTEMPTS:
                    raise
                self.forget(parts)
        raise AssertionError("unreachable")

    def retry(self, parts: tuple[str, ...], doing: str, what: str, action: Callable[[int], _T]) -> _T:
        """``action`` on the descriptor of ``root/parts...``; walked again when it fails with ENOENT (the directory
        was removed under us) unless ``action`` says otherwise by raising something else."""
        for attempt in range(1, ATTEMPTS + 1):
            fd = self.directory(parts, doing, what)
            try:
                return action(fd)
            except FileNotFoundError:
                if attempt == ATTEMPTS:
                    raise
                self.forget(parts)
        raise AssertionError("unreachable")

    def forget(self, parts: tuple[str, ...]) -> None:
        """Close the descriptors of ``parts``' directories (not the root's): the next walk opens them afresh."""
        for depth in range(1, len(parts) + 1):
            if (fd := self._fds.pop(parts[:depth], None)) is not None:
                os.close(fd)

    def _walk(self, parts: tuple[str, ...], doing: str, what: str, create: bool) -> int:
        depth = len(parts)
        while depth and parts[:depth] not in self._fds:
            depth -= 1
        fd = self._fds[parts[:depth]] if parts[:depth] in self._fds else self._open_root(doing, create)
        for below in range(depth + 1, len(parts) + 1):
            fd = self._fds[parts[:below]] = self._open(fd, parts[:below], doing, what, create)
        return fd

    def _open_root(self, doing: str, create: bool) -> int:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the operator's path: followed as given, like a read's
        try:
            try:
                fd = os.open(self.root, flags)
            except FileNotFoundError:
                if not create:
                    raise
                os.makedirs(self.root, exist_ok=True)
                fd = os.open(self.root, flags)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StoreError(f"cannot {doing}: the store's root {self.root}: {exc.strerror or exc}") from exc
        self._fds[()] = fd
        return fd

    def _open(self, parent: int, here: tuple[str, ...], doing: str, what: str, create: bool) -> int:
        try:
            return os.open(here[-1], _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        except OSError as exc:
            raise self._refused(parent, here, doing, what, exc) from exc
        try:
            os.mkdir(here[-1], dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile by another writer, or planted: the open below tells which
        except FileNotFoundError:
            raise
        except OSError as exc:
            where = self.uri("/".join(here))
            raise StoreError(f"cannot {doing}: cannot create directory {where}: {exc.strerror or exc}") from exc
        try:
            return os.open(here[-1], _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._refused(parent, here, doing, what, exc) from exc

    def _refused(self, parent: int, here: tuple[str, ...], doing: str, what: str, exc: OSError) -> StoreError:
        where = self.uri("/".join(here))
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return StoreError(f"cannot {doing}: cannot open directory {where}: {exc.strerror or exc}")
        try:
            mode = os.lstat(here[-1], dir_fd=parent).st_mode
            found = "a regular file" if stat.S_ISREG(mode) else kind(mode)
        except OSError:
            found = "no directory"
        return UnsafeObjectError(
            f"cannot {doing} under {where}: {found}; expected {what}, never followed (nothing {self.done}): check what "
            "it is and remove it by hand"
        )


class Slot(NamedTuple):
    """The file ``name`` in the directory ``parts`` of ``tree``; ``path`` names it in messages (and for callers who
    hand a staged file on), ``doing`` and ``what`` say what a refusal of one of its directories stopped."""

    tree: Tree
    parts: tuple[str, ...]
    name: str
    path: str
    doing: str
    what: str

    def dir_fd(self, *, create: bool = True) -> int:
        return self.tree.directory(self.parts, self.doing, self.what, create=create)

    def retry(self, action: Callable[[int], _T]) -> _T:
        return self.tree.retry(self.parts, self.doing, self.what, action)

    def unlink(self) -> None:
        """Remove the file if it is there (never through a link: the directory is the one walked); a cleanup, so
        a directory gone or refused leaves nothing of ours to remove."""
        try:
            os.unlink(self.name, dir_fd=self.dir_fd(create=False))
        except (FileNotFoundError, StoreError):
            pass

    def exists(self) -> bool:
        try:
            os.stat(self.name, dir_fd=self.dir_fd(create=False), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True


def move(source: Slot, target: Slot, op: Callable[..., None]) -> None:
    """``op`` (os.replace, or :func:`hard_link`) from ``source`` to ``target``, relative to their directories; again
    after walking ``target``'s directories anew when one was removed meanwhile and ``source`` is still there.
    FileExistsError is the caller's; other OS failures are StoreError."""

    def step(target_fd: int) -> None:
        try:
            op(source.name, target.name, src_dir_fd=source.dir_fd(create=False), dst_dir_fd=target_fd)
        except FileNotFoundError:
            if not source.exists():
                raise StoreError(f"cannot move {source.path} to {target.path}: {source.path} vanished") from None
            raise

    try:
        target.retry(step)
    except (FileExistsError, StoreError):
        raise
    except OSError as exc:
        raise StoreError(f"cannot move {source.path} to {target.path}: {exc.strerror or exc}") from exc


def hard_link(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
    """A hard link of the entry ``src`` itself (a link planted there is linked, never followed)."""
    os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)


@contextlib.contextmanager
def reading(
    root: str, parts: tuple[str, ...], uri: Callable[[str], str], key_uri: str
) -> Iterator[tuple[int | None, str]]:
    """(directory descriptor, name) to open the key ``parts`` relative to, its directories walked from the root
    without following a link (UnsafeObjectError naming the key and the component, nothing read); a directory
    missing on the way is NotFoundError. The root's own key (no parts) is its path, as given."""
    if not parts:
        yield None, root
        return
    with Tree(root, uri, done="read") as tree:
        try:
            fd = tree.directory(parts[:-1], f"read {key_uri}", "a directory", create=False)
        except FileNotFoundError as exc:
            raise NotFoundError(f"{key_uri} does not exist") from exc
        yield fd, parts[-1]
