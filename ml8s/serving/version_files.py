"""The files of a served version's directory (``versions/v..._<hash>/``): what they are, checking that a directory
holds exactly them, and writing a new one aside then renaming it in (:mod:`ml8s.serving.directory` keeps
``current`` pointing at a complete one)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable

from ml8s.chain import PayloadKind
from ml8s.contract import layout
from ml8s.deltas import encode_full
from ml8s.errors import ServingError, StoreError
from ml8s.serving.served import Served
from ml8s.store import fsync_dir, read_regular
from ml8s.weights import WEIGHTS_FULL

VERSION_FILE = layout.SERVED_VERSION_FILE
FILE_MODE, DIR_MODE = 0o644, 0o755  # a served version is the follower's to write, everyone's to read


def served_files(served: Served) -> dict[str, bytes]:
    """Every file of ``served``'s version directory: the payload's other files, the full weights (the
    committed bytes when the version is a FULL, so a user can check them against the block's sha256) and
    ``ml8s_version.json``.

    Raises:
        ServingError: a payload file is (or is under) ``ml8s_version.json``, or a DELTA's ``model_native.safetensors``,
            or is also the folder of another payload file.
    """
    info = served.info
    # only a FULL's weights file is the verified weights: in any other version that name is a foreign file
    reserved = (VERSION_FILE,) if info.payload_kind == PayloadKind.FULL else (VERSION_FILE, WEIGHTS_FULL)
    clash = layout.clashing_names(served.files, reserved)
    if clash:
        raise ServingError(
            f"chain {info.chain_name!r} v{info.counter} ({info.version_dir}): payload file(s) {clash} would be "
            f"overwritten by the file(s) the follower writes there; expected a payload without {list(reserved)} "
            "(the directory keeps the version it holds: commit the files under another name)"
        )
    # An object store holds "cfg" and "cfg/a.json" side by side; a directory cannot: refused like a clash above,
    # not found by the write (IsADirectoryError: the forever loop ended as if --out were unwritable)
    folders = sorted(set(served.files) & _folders(served.files))
    if folders:
        raise ServingError(
            f"chain {info.chain_name!r} v{info.counter} ({info.version_dir}): payload file(s) {folders} are also the "
            "folder(s) of other payload files; expected names a directory can hold (the directory keeps the "
            "version it holds)"
        )
    weights = served.files.get(WEIGHTS_FULL)
    return {
        **served.files,
        WEIGHTS_FULL: weights if weights is not None else encode_full(served.weights.tensors),
        VERSION_FILE: served.info.model_dump_json().encode(),
    }


def intact(path: str, files: dict[str, bytes]) -> bool:
    """``path`` holds exactly ``files``, byte for byte (a regular file each, nothing else). Read without
    blocking or following a link: a FIFO there would hang a plain ``open``, and a link's target is no file
    this follower wrote."""
    try:
        if os.path.islink(path) or _tree(path) != (set(files), _folders(files) - {""}):
            return False
        for name, data in sorted(files.items()):
            if read_regular(os.path.join(path, name), name, max_bytes=len(data)) != data:
                return False
    except (OSError, StoreError):  # absent, not a directory, no regular file, larger, unreadable
        return False
    return True


def write_version(versions: str, final: str, files: dict[str, bytes]) -> None:
    """``files`` into the new directory ``final`` of ``versions`` (which does not exist): written aside, one rename."""
    tmp = os.path.join(versions, f".tmp-{uuid.uuid4().hex}")
    # Explicit modes (the umask may only narrow them): under a umask of 0 the served model was writable by
    # every local user, and a follower does not re-read its files between publishes.
    os.makedirs(tmp, mode=DIR_MODE)
    try:
        # ml8s_version.json last: a directory with it is complete
        order = [*sorted(n for n in files if n != VERSION_FILE), VERSION_FILE]
        for folder in sorted(_folders(files)):  # a payload name may hold folders ("config/a.json")
            os.makedirs(os.path.join(tmp, folder), mode=DIR_MODE, exist_ok=True)
        for name in order:
            fd = os.open(os.path.join(tmp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            with open(fd, "wb") as handle:
                handle.write(files[name])
                handle.flush()
                os.fsync(handle.fileno())
        for folder in sorted(_folders(files), reverse=True):
            fsync_dir(os.path.join(tmp, folder))
        os.rename(tmp, final)
        fsync_dir(versions)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _folders(names: Iterable[str]) -> set[str]:
    """Every folder (relative; "" the top) that holds one of ``names`` or one of these folders."""
    found = {""}
    for name in names:
        parts = name.split("/")[:-1]
        found.update("/".join(parts[:depth]) for depth in range(1, len(parts) + 1))
    return found


def _tree(path: str) -> tuple[set[str], set[str]]:
    """(every entry that is no directory, every directory) under ``path``, as relative names; a link to a
    directory counts as a directory and is not followed, so the files it leads to are missing."""
    entries: tuple[set[str], set[str]] = (set(), set())
    for folder, dirs, others in os.walk(path):
        rel = os.path.relpath(folder, path)
        prefix = "" if rel == "." else f"{rel}/"
        entries[0].update(prefix + name for name in others)
        entries[1].update(prefix + name for name in dirs)
    return entries
