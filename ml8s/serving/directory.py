"""A local directory that always holds one complete, verified version, for servers that reload from disk.

Layout of ``DIR``::

    current -> versions/v0000000042_3ebfd8f7f7f3      a symlink, replaced atomically
    versions/v0000000042_3ebfd8f7f7f3/
        model_native.safetensors    the version's full weights (safetensors, recording its weights hash)
        <every other payload file>  e.g. model.onnx, feature_schema.json, manifest.json (cfg/a.json: in cfg/)
        ml8s_version.json           chain, counter, block hash, semver, kind, weights hash
    .follower-state.json            the last head accepted (a restarted follower still refuses a rollback)
    .follower.lock                  locked (flock) by the running follower: a second one is refused

A version is written into a hidden sibling (``versions/.tmp-...``), flushed, renamed to a name no
directory holds yet, then ``current`` is pointed at it by creating a new symlink (``.current-<uuid>``) and
renaming it over the old one. That rename is the only step that changes what ``current`` names, and both
its old and its new target are complete directories: a reader resolving ``current`` sees the old version
or the new one, never a mix, and a process killed at any step leaves ``current`` naming a complete
directory. A version directory is never renamed or removed while ``current`` names it: a damaged one is
replaced by a fresh copy under a new name (``v..._<12 hex>-<8 hex>``), ``current`` is swapped to the copy,
and only then is the damaged one removed. The version before the current one is kept (a server may still
be reading it); older ones are removed, and so are a killed writer's leftovers (``versions/.tmp-*``,
``.current-*`` links), on start and after every publish.

Each publish (a new version, and the first one after a follower starts) compares the version's directory
with the verified payload byte for byte, so a file damaged, truncated, removed or added on disk since an
earlier publish is rewritten rather than served. Between publishes the directory is not re-read: a
follower does not hash its model on every poll.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import shutil
import uuid
from collections.abc import Callable

from filelock import FileLock, Timeout
from pydantic import ValidationError

from ml8s.errors import ConfigError, NoSpaceError, StoreError
from ml8s.locks import path_lock
from ml8s.serving.served import Served, ServedVersion
from ml8s.serving.version_files import DIR_MODE, VERSION_FILE, intact, served_files, write_version
from ml8s.store import fsync_dir, read_regular

CURRENT = "current"
VERSIONS = "versions"
STATE_FILE = ".follower-state.json"
LOCK_FILE = ".follower.lock"  # held by the running follower (flock)
# What flock answers on a filesystem without locks (ENOLCK: an NFS mount without a lock manager)
NO_LOCKS = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL})
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})  # a write that fails for these may succeed once space is freed
VERSION_FILE_MAX = 64 * 1024  # ml8s_version.json is a few hundred bytes
KEEP = 2  # the current version and the one before it


NAME_LENGTH = len("v0000000042_3ebfd8f7f7f3")  # a version's name; a fresh copy of it adds "-r<n>"
VERSION_DIR = re.compile(r"v[0-9]{10,}_[0-9a-f]{12}(-r[0-9]+)?")  # version_name, or a repair copy (_free_name)


def version_name(info: ServedVersion) -> str:
    """The directory name of ``info``'s version (its first copy)."""
    return f"v{info.counter:010d}_{info.block_hash[:12]}"


class ModelDirectory:
    """``DIR`` as laid out in the module docstring; one follower writes it at a time."""

    def __init__(self, root: str, *, exclusive: bool = False) -> None:
        """``exclusive``: hold ``.follower.lock`` while this object lives, refusing a second holder (a follower
        starting would remove a running one's half-written version as a killed writer's leftover)."""
        if not root:  # abspath("") is the working directory: an unset variable would fill it
            raise ConfigError(f"--out {root!r} is empty; expected the path of the directory to keep current")
        self.root = os.path.abspath(root)
        self.versions = os.path.join(self.root, VERSIONS)
        self._lock: FileLock | None = None
        try:
            # the mode of each directory it creates, not the umask's: whoever may write here chooses what is served
            os.makedirs(self.root, mode=DIR_MODE, exist_ok=True)
            os.makedirs(self.versions, mode=DIR_MODE, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {root}: {exc.strerror or exc}; expected a writable directory") from exc
        if exclusive:
            self._lock = self._exclusive()
        try:
            self._check_versions()
            self._check_current()
            self._remove_leftovers()  # of a follower killed mid-publish
        except BaseException:
            self.close()  # no caller holds this object to close it
            raise

    def _exclusive(self) -> FileLock | None:
        path = os.path.join(self.root, LOCK_FILE)
        lock = path_lock(path)
        try:
            lock.acquire(blocking=False)
        except Timeout as exc:
            raise ConfigError(
                f"--out {self.root}: another follower holds {path}; expected one follower per directory (stop "
                "it, or give this one its own --out)"
            ) from exc
        except OSError as exc:
            if exc.errno in NO_LOCKS:  # followed unlocked, as before locks were taken
                return None
            # a symbolic link planted there (ELOOP) is refused, never followed
            raise ConfigError(f"--out {self.root}: cannot open {path}: {exc.strerror or exc}") from exc
        return lock

    def close(self) -> None:
        """Release ``.follower.lock`` (``exclusive``); the process exiting releases it too."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @property
    def state_path(self) -> str:
        return os.path.join(self.root, STATE_FILE)

    def current(self) -> ServedVersion | None:
        """The version ``current`` points at, None when there is none (or it is unreadable, or no regular file:
        a FIFO put there would block a plain ``open`` forever)."""
        try:
            data = read_regular(
                os.path.join(self.root, CURRENT, VERSION_FILE), VERSION_FILE, max_bytes=VERSION_FILE_MAX
            )
            return ServedVersion.model_validate_json(data)
        except (StoreError, ValidationError):
            return None

    def target(self) -> str | None:
        """The name of the version directory ``current`` names (None: no ``current`` link). A link the follower
        did not write (``/elsewhere/versions/v...``) is returned whole, so it matches no name under ``versions/``
        and is swapped: its basename alone would pass another directory's files for this one's."""
        try:
            link = os.readlink(os.path.join(self.root, CURRENT))
        except OSError:
            return None
        parent, name = os.path.split(os.path.normpath(link))
        return name if parent == VERSIONS else link

    def publish(self, served: Served, warn: Callable[[str], None] = lambda _: None) -> str:
        """Write ``served`` (unless a directory holds exactly its files already) and point ``current`` at it.

        ``warn`` hears of a directory found damaged on disk (and replaced by a fresh copy).
        """
        return self.publish_files(served.info, served_files(served), warn)

    def publish_files(
        self, info: ServedVersion, files: dict[str, bytes], warn: Callable[[str], None] = lambda _: None
    ) -> str:
        """``publish`` of a version's complete ``files`` (``served_files``); returns its directory.

        Raises:
            NoSpaceError: no room for the version or the swap's link (its partial files removed, ``current`` kept).
            ConfigError: ``versions`` or ``current`` is not the follower's, or another write failed (the same).
        """
        self._check_versions()  # before its entries are read, written or pruned
        name = version_name(info)
        copies = self._copies(name)
        dest = next((copy for copy in copies if intact(os.path.join(self.versions, copy), files)), None)
        if dest is None:
            if copies:
                where = os.path.join(self.versions, copies[0])
                warn(f"ml8s: {where}: its files differ from chain version {info.counter}'s payload; rewriting them")
            dest = self._free_name(name)
            try:
                write_version(self.versions, os.path.join(self.versions, dest), files)
            except OSError as exc:  # a full disk, a read-only mount: the current version stays as it was
                raise _write_error(exc)(
                    f"--out {self.root}: cannot write {VERSIONS}/{dest}: {exc.strerror or exc}; expected a "
                    "writable directory with room for the version"
                ) from exc
        previous = self.target()
        if previous != dest:
            self._check_current()
            link = os.path.join(self.root, f".{CURRENT}-{uuid.uuid4().hex}")
            try:
                os.symlink(os.path.join(VERSIONS, dest), link)
                os.replace(link, os.path.join(self.root, CURRENT))  # the swap: one rename
                fsync_dir(self.root)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(link)
                raise _write_error(exc)(
                    f"--out {self.root}: cannot point {CURRENT} at {VERSIONS}/{dest}: {exc.strerror or exc}; "
                    "expected a writable directory"
                ) from exc
        self._prune(dest, previous)
        return os.path.join(self.versions, dest)

    def _check_current(self) -> None:
        """``current`` must be the link a follower keeps (or absent): a real directory or file there is someone's
        (a rename cannot replace a directory, and would delete a file), so it is named before anything is fetched
        (and never deleted)."""
        path = os.path.join(self.root, CURRENT)
        if os.path.lexists(path) and not os.path.islink(path):
            what = "directory" if os.path.isdir(path) else "file"
            raise ConfigError(
                f"--out {self.root}: {path} is a {what}, not the symlink a follower keeps there; expected a "
                f"symlink or nothing (move the {what} away: ml8s does not delete it)"
            )

    def _check_versions(self) -> None:
        """``versions`` must be the follower's own directory: through a symbolic link, pruning would remove
        every ``v*`` entry (and ``.tmp-*``) of the directory it leads to, someone else's files."""
        if os.path.islink(self.versions) or not os.path.isdir(self.versions):
            what = "symbolic link" if os.path.islink(self.versions) else "file"
            raise ConfigError(
                f"--out {self.root}: {self.versions} is a {what}, not the directory a follower keeps there; expected "
                f"a directory or nothing (the follower removes old versions from it: move the {what} away)"
            )

    def _free_name(self, name: str) -> str:
        """``name``, or its first free repair name ``name-r1``, ``name-r2`` ... (a damaged copy is never renamed
        under ``current``; the name says which copy it is, the same on every machine that repairs alike)."""
        candidates = itertools.chain([name], (f"{name}-r{n}" for n in itertools.count(1)))
        return next(c for c in candidates if not os.path.lexists(os.path.join(self.versions, c)))

    def _copies(self, name: str) -> list[str]:
        """The directories holding (or meant to hold) version ``name``, the one ``current`` names first."""
        target = self.target()
        found = sorted(n for n in os.listdir(self.versions) if n[:NAME_LENGTH] == name and not n.startswith("."))
        return sorted(found, key=lambda n: n != target)

    def _prune(self, dest: str, previous: str | None) -> None:
        """Keep ``dest`` and the version served before it; remove the rest and every leftover."""
        keep = {dest}
        # only the names a follower writes: --out set to a chain's own directory (file://) pruned its history
        # (v0000000001_1.0.0_<hash12> ...), and an operator's v* files are theirs
        names = sorted(n for n in os.listdir(self.versions) if VERSION_DIR.fullmatch(n))
        if previous is not None and previous in names and previous[:NAME_LENGTH] != dest[:NAME_LENGTH]:
            keep.add(previous)
        else:  # the first publish, or a repair: keep the newest earlier version on disk
            earlier = [n for n in names if n[:NAME_LENGTH] < dest[:NAME_LENGTH]]
            keep.update(earlier[-1:])
        for name in names:
            if name not in keep:
                shutil.rmtree(os.path.join(self.versions, name), ignore_errors=True)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """A killed writer's half-written directories, the swap links it never renamed, and the state files
        it wrote but never renamed over its head and promotion state (``{state}*.tmp``)."""
        for name in os.listdir(self.versions):
            if name.startswith(".tmp-"):
                shutil.rmtree(os.path.join(self.versions, name), ignore_errors=True)
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if name.startswith(f".{CURRENT}-") and os.path.islink(path):
                os.unlink(path)
            elif name.startswith(STATE_FILE) and name.endswith(".tmp") and not os.path.islink(path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def _write_error(exc: OSError) -> type[ConfigError]:
    """The error of a failed write: NoSpaceError (it may heal: a polling follower retries) or ConfigError."""
    return NoSpaceError if exc.errno in NO_SPACE else ConfigError
