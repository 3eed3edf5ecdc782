"""Writing the demo dataset: idempotent, atomic per file, and never mixing two datasets in one directory.

Each file is written atomically (temporary file in the same directory, fsync, ``os.replace``); a directory
that already holds exactly these bytes is left untouched (same mtimes, so nothing downstream sees a change);
a directory holding anything else (another dataset, foreign files) is refused rather than half-overwritten.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ml8s.errors import DataError
from ml8s.output_files import replace_file
from ml8s.store import fsync_dir

_PART_RE = re.compile(r"^part-\d{5}\.csv$")
# Temporary files this module creates (mkstemp adds random characters between prefix and suffix).
_TMP_RE = re.compile(r"^\.part-\d{5}\.csv\..+\.tmp$")


@dataclass(frozen=True)
class DemoFile:
    """One generated file: its name in the output directory, its row count, and how to make its bytes.

    The bytes are made each time ``content`` is read and never kept, so a large dataset is written one file at a
    time; ``write_dataset`` reads each file's content once.
    """

    name: str
    rows: int
    make: Callable[[], bytes]

    @property
    def content(self) -> bytes:
        return self.make()


def write_dataset(out_dir: str, demo_files: Sequence[DemoFile]) -> list[str]:
    """Write the files that are missing from ``out_dir``; return their names (empty: nothing to do).

    Raises DataError, before writing anything, when ``out_dir`` holds anything but a subset of these
    exact files: an existing ``part-*.csv`` with other bytes is another dataset (other seed, rows or
    file count) that a previous run may have fingerprinted, so it is never silently replaced.
    Leftover temporary files of an interrupted run of this generator are removed (they would
    otherwise enter the data fingerprint, which counts hidden files).
    """
    expected = {f.name: f for f in demo_files}
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise DataError(f"--out {out_dir} exists and is not a directory; expected a directory for the CSV files")
    try:  # a path under a file, a broken link, a read-only or unreadable parent: the OS says which
        os.makedirs(out_dir, exist_ok=True)
        names = sorted(os.listdir(out_dir))
    except OSError as exc:
        raise DataError(
            f"--out {out_dir} cannot be created or listed: {exc.strerror or exc}; expected a writable directory for "
            "the CSV files"
        ) from exc
    stale: list[str] = []
    present: set[str] = set()
    for name in names:
        path = os.path.join(out_dir, name)
        if _TMP_RE.match(name) and os.path.isfile(path) and not os.path.islink(path):
            stale.append(path)
        elif name in expected and os.path.isfile(path) and not os.path.islink(path):
            if not _same_bytes(path, expected[name].content):
                raise DataError(
                    f"--out {out_dir} already holds a different dataset ({name} differs from what --rows/--files/"
                    "--seed would generate); refusing to mix datasets: remove the directory or choose another --out"
                )
            present.add(name)
        else:
            kind = "file" if os.path.isfile(path) else "entry"
            raise DataError(
                f"--out {out_dir} holds a foreign {kind} {name!r} (expected only part-NNNNN.csv files of this "
                "dataset); refusing to mix datasets: remove it or choose another --out"
            )
    for path in stale:
        os.unlink(path)
    written = [f.name for f in demo_files if f.name not in present]
    for name in written:
        _atomic_write(out_dir, name, expected[name].content)
    if stale:  # each written file's rename is made durable by replace_file; the removals here
        fsync_dir(out_dir)
    return written


def _same_bytes(path: str, content: bytes) -> bool:
    if os.path.getsize(path) != len(content):
        return False
    with open(path, "rb") as handle:
        return handle.read() == content


def _atomic_write(directory: str, name: str, content: bytes) -> None:
    """Temporary file in the same directory, fsync, then rename: readers see all of it or none."""
    path = os.path.join(directory, name)

    def fail(reason: str) -> DataError:
        return DataError(f"cannot write the demo file {path}: {reason}")

    replace_file(path, content, 0o644, fail)  # 0644: data files are plain readable files (mkstemp makes 0600)
