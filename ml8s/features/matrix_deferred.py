"""The feature matrix file written while this process trains on the rows it handed over (``ml8s run``).

Training on a CPU runs on one core; the Parquet file of a large matrix is seconds of compression (21 CPU s of
the features step at 20M rows). Where the matrix is large enough (:func:`defers`), the features step of
``ml8s run`` writes only the float32 rows training maps (the scratch file of :mod:`ml8s.features.matrix`) and
a thread of this module rebuilds the file's row groups from those rows and writes the file on the other core
while training runs. The file's bytes are those of the direct write: the same row groups, the same columns in
the same order, the same writer (``open_writer``). The run publishes the file once training ends
(:func:`deferred_matrix`), so nothing outside the process sees it before it is whole.

A failure of the thread (a full disk) is raised in the training process at the end of the epoch in which it
happened (:func:`raise_if_failed`), and again when training ends; a run that fails or is interrupted stops the
thread and removes the partial file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s.errors import OutputError
from ml8s.threads import lower_priority

# A row group is rebuilt this many rows at a time: the slice's rows are read from the scratch file, put back in
# the file's order, and copied into the group's columns.
ROWS_PER_READ = 1 << 16
_FLOAT32 = np.dtype(np.float32).itemsize
_NICE = 10  # the writing thread's niceness, above training's 0


def defers(rows: int, row_group: int, train_rows: int) -> bool:
    """Whether the matrix file is written while training runs: when one row group's float32 columns (what the
    thread holds, besides a slice) are at most an eighth of the training rows training keeps resident, so the
    training phase's memory grows by at most 12.5% (at 20M demo rows: 128 MiB beside 1.95 GiB). Below that the
    file is written by the features step, before training, as one more group there would raise the run's peak
    (at 2M rows training peaks at 580 MiB, with a 600 MiB goal)."""
    return min(rows, row_group) * 8 <= train_rows


class Writer:
    """The thread writing the matrix file ``path`` from the scratch rows: ``fd`` (taken: the thread closes it) holds
    them grouped by split (``features`` float32 values a row), each split value's group starting at the row
    ``starts`` gives; ``split`` is every row's split in the file's order, ``grouped_target`` the class indices in the
    grouped order."""

    def __init__(
        self,
        path: str,
        open_writer: Callable[[str], pq.ParquetWriter],
        fd: int,
        split: npt.NDArray[np.integer],
        grouped_target: npt.NDArray[np.int32],
        starts: dict[int, int],
        features: int,
        row_group: int,
    ) -> None:
        self.path, self.open_writer, self.fd, self.features, self.row_group = path, open_writer, fd, features, row_group
        self.split, self.grouped_target = np.asarray(split, dtype=np.int8), grouped_target
        self.next = dict(starts)  # split value -> its next row, grouped order
        self.cancelled = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="ml8s-matrix-writer", daemon=True)

    def _run(self) -> None:
        # Training is the run's critical path: where the two compete for a core (a loaded or one-core machine), the
        # scheduler favours it.
        lower_priority(_NICE)
        try:
            with self.open_writer(self.path) as writer:
                for start in range(0, len(self.split), self.row_group):
                    if self.cancelled.is_set():
                        break
                    table = [self._group(start, min(start + self.row_group, len(self.split)), writer.schema)]
                    writer.write_table(table.pop(), row_group_size=self.row_group)
        except OSError as exc:  # a full or failing disk: handed to the training thread, which raises it
            self.error = write_error(self.path, exc)
        except BaseException as exc:  # any other failure is raised by the training thread too
            self.error = exc
        finally:
            os.close(self.fd)
        if self.cancelled.is_set() or self.error is not None:
            with suppress(FileNotFoundError):
                os.unlink(self.path)

    def _group(self, start: int, end: int, schema: pa.Schema) -> pa.Table:
        """Rows ``start:end`` of the file as its row group's table: each slice's rows read from the scratch file a
        split at a time, put back in the file's order, then copied into the columns."""
        part = self.split[start:end]
        columns = [np.empty(end - start, dtype=np.float32) for _ in range(self.features)]
        target = np.empty(end - start, dtype=np.int32)
        for first in range(0, len(part), ROWS_PER_READ):
            piece = part[first : first + ROWS_PER_READ]
            rows = np.empty((len(piece), self.features), dtype=np.float32)
            for value in np.flatnonzero(np.bincount(piece)).tolist():
                chosen = np.flatnonzero(piece == value)
                at = self.next[value]
                rows[chosen] = self._read(at, len(chosen))
                target[first + chosen] = self.grouped_target[at : at + len(chosen)]
                self.next[value] = at + len(chosen)
            for column, values in zip(columns, rows.T, strict=True):
                column[first : first + len(piece)] = values
        arrays = [pa.array(values) for values in columns]
        arrays += [pa.array(target), pa.array(part.astype(np.int8))]
        return pa.Table.from_arrays(arrays, schema=schema)

    def _read(self, row: int, count: int) -> npt.NDArray[np.float32]:
        out = np.empty((count, self.features), dtype=np.float32)
        view, offset = out.reshape(-1).view(np.uint8).data, row * self.features * _FLOAT32
        while view:
            got = os.preadv(self.fd, [view], offset)
            if not got:
                raise OSError(f"the scratch rows of {self.path} ended early, at byte {offset}")
            view, offset = view[got:], offset + got
        return out


def write_error(path: str, exc: OSError) -> OutputError:
    """The named error of a matrix file that could not be written (a full disk, most likely)."""
    return OutputError(
        f"cannot write the feature matrix {path} (in the run's temporary directory): {exc.strerror or exc}; "
        "expected room for it under TMPDIR"
    )


_pending: list[Writer] = []  # at most one: the write of the matrix this process trains on


def start(writer: Writer) -> None:
    """Run ``writer``'s thread; :func:`deferred_matrix` waits for it."""
    _finish(cancel=True)  # one a failed step left (none when every write runs inside deferred_matrix)
    _pending.append(writer)
    writer.thread.start()


def raise_if_failed() -> None:
    """Raise the error of a write in progress that failed (training calls it at the end of each epoch)."""
    for writer in _pending:
        if writer.error is not None:
            raise writer.error


@contextmanager
def deferred_matrix() -> Iterator[None]:
    """The block in which a matrix file handed over for training may still be written: when it ends, the file is
    whole (or the write's error is raised); when it raises, the write is stopped and the partial file removed."""
    try:
        yield
    except BaseException:
        _finish(cancel=True)
        raise
    _finish(cancel=False)


def _finish(*, cancel: bool) -> None:
    while _pending:
        writer = _pending.pop()
        if cancel:
            writer.cancelled.set()
        try:
            writer.thread.join()
        except BaseException:  # interrupted while waiting: the write is abandoned
            writer.cancelled.set()
            writer.thread.join()
            raise
        if writer.error is not None and not cancel:
            raise writer.error
