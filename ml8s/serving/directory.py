"""A local directory that always holds one complete, verified version, for servers that reload from disk.

Layout of ``DIR``::

    current -> versions/v0000000042_3ebfd8f7f7f3      a symlink, replaced atomically
    versions/v0000000042_3ebfd8f7f7f3/
        model_native.safetensors    the version's full weights (safetensors, recording its weights hash)
        <every other payload file>  e.g. model.onnx, feature_schema.json, manifest.json
        ml8s_version.json           chain, counter, block hash, semver, kind, weights hash
    .follower-state.json            the last head accepted (a restarted follower still refuses a rollback)

A version is written into a hidden sibling (``versions/.tmp-...``), flushed, renamed to its final name,
then ``current`` is pointed at it by creating a new symlink and renaming it over the old one (one
``rename``: a reader resolving ``current`` sees the old version or the new one, never a mix). The
version before the current one is kept (a server may still be reading it); older ones are removed.

Each publish (a new version, and the first one after a follower starts) compares the version's directory
with the verified payload byte for byte, so a file damaged, truncated, removed or added on disk since an
earlier publish is rewritten rather than served. Between publishes the directory is not re-read: a
follower does not hash its model on every poll.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable

from pydantic import ValidationError

from ml8s.deltas import encode_full
from ml8s.errors import ConfigError
from ml8s.serving.served import Served, ServedVersion
from ml8s.weights import WEIGHTS_FULL

CURRENT = "current"
VERSIONS = "versions"
VERSION_FILE = "ml8s_version.json"
STATE_FILE = ".follower-state.json"
KEEP = 2  # the current version and the one before it


class ModelDirectory:
    """``DIR`` as laid out in the module docstring."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        try:
            os.makedirs(os.path.join(self.root, VERSIONS), exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {root}: {exc.strerror or exc}; expected a writable directory") from exc

    @property
    def state_path(self) -> str:
        return os.path.join(self.root, STATE_FILE)

    def current(self) -> ServedVersion | None:
        """The version ``current`` points at, None when there is none (or it is unreadable)."""
        try:
            with open(os.path.join(self.root, CURRENT, VERSION_FILE), "rb") as handle:
                return ServedVersion.model_validate_json(handle.read())
        except (OSError, ValidationError):
            return None

    def publish(self, served: Served, warn: Callable[[str], None] = lambda _: None) -> str:
        """Write ``served`` (unless its directory holds exactly its files already) and point ``current`` at it.

        ``warn`` hears of a directory found damaged on disk (and rewritten).
        """
        info = served.info
        name = f"v{info.counter:010d}_{info.block_hash[:12]}"
        final = os.path.join(self.root, VERSIONS, name)
        files = {
            **served.files,
            WEIGHTS_FULL: encode_full(served.weights.tensors),
            VERSION_FILE: info.model_dump_json().encode(),
        }
        if not self._intact(final, files):
            if os.path.lexists(final):
                warn(f"ml8s: {final}: its files differ from chain version {info.counter}'s payload; rewriting them")
            self._write(final, files)
        link = os.path.join(self.root, f".{CURRENT}-{uuid.uuid4().hex}")
        os.symlink(os.path.join(VERSIONS, name), link)
        os.replace(link, os.path.join(self.root, CURRENT))
        self._prune(name)
        return final

    @staticmethod
    def _intact(path: str, files: dict[str, bytes]) -> bool:
        """``path`` holds exactly ``files``, byte for byte (a regular file each, nothing else)."""
        try:
            if sorted(os.listdir(path)) != sorted(files):
                return False
            for name, data in sorted(files.items()):
                with open(os.path.join(path, name), "rb") as handle:
                    if handle.read(len(data) + 1) != data:
                        return False
        except OSError:  # absent, not a directory, a file that is a directory, unreadable
            return False
        return True

    def _write(self, final: str, files: dict[str, bytes]) -> None:
        tmp = os.path.join(self.root, VERSIONS, f".tmp-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        try:
            # ml8s_version.json last: a directory with it is complete
            order = [*sorted(n for n in files if n != VERSION_FILE), VERSION_FILE]
            for name in order:
                with open(os.path.join(tmp, name), "wb") as handle:
                    handle.write(files[name])
                    handle.flush()
                    os.fsync(handle.fileno())
            if os.path.lexists(final):  # damaged or incomplete: moved aside in one rename, removed after
                aside = os.path.join(self.root, VERSIONS, f".tmp-{uuid.uuid4().hex}")
                os.rename(final, aside)
                os.rename(tmp, final)
                if os.path.isdir(aside) and not os.path.islink(aside):
                    shutil.rmtree(aside, ignore_errors=True)
                else:
                    os.unlink(aside)
            else:
                os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _prune(self, keep_name: str) -> None:
        base = os.path.join(self.root, VERSIONS)
        names = sorted(n for n in os.listdir(base) if n.startswith("v"))
        at = names.index(keep_name)
        keep = set(names[max(0, at - KEEP + 1) : at + 1])
        for name in names:
            if name not in keep:
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        for name in os.listdir(base):
            if name.startswith(".tmp-"):  # a writer killed mid-way
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
