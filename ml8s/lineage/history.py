"""A lineage's generations as training records: encoded by the lineage's frozen feature transform, split,
and appended to the lineage's append-only record history (``ml8s.records``), which training memory-maps.

Encoding is deterministic: the same generation files, transform, RANDOM_SEED and TEST_SIZE give the same
records bytes in any process, so a generation already in the history is checked against the sha256 the
parent recorded (or re-encoded and compared), never trusted on its name alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ml8s.contract.training_state import Generation
from ml8s.data.columns import decoded
from ml8s.data.dataset import parse_file
from ml8s.data.fingerprint import FileEntry, Fingerprint, fingerprint_entries
from ml8s.data.missing import MISSING_TOKENS
from ml8s.data.sources import read_verified
from ml8s.errors import (
    GenerationMissingError,
    LineageDataError,
    LineageError,
    PredictionInputError,
    RecordsAppendError,
    RecordsChecksumError,
    RecordsExtraBytesError,
    RecordsTruncatedError,
)
from ml8s.inference import RawTransform
from ml8s.lineage.columns import Keep, file_tables, no_rows, typed_columns
from ml8s.records import GenerationInfo, RecordSchema, RecordStore

# A racer appends one generation at a time: a few re-reads always see it done.
_APPEND_ATTEMPTS = 4

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EncodedGeneration:
    """One generation's rows: features (float32), class indices, and the split (0 train, 1 held out)."""

    index: int
    x: FloatArray
    y: IntArray
    split: npt.NDArray[np.int8]

    def records(self) -> FloatArray:
        """The training rows as records: features, then the class index as float32."""
        train = self.split == 0
        return np.ascontiguousarray(np.column_stack([self.x[train], self.y[train].astype(np.float32)]), np.float32)


def record_schema(transform: RawTransform) -> RecordSchema:
    return RecordSchema.build(transform.feature_names, transform.target_column, transform.classes)


def encode_generation(
    generation: Generation, fingerprint: Fingerprint, transform: RawTransform, random_seed: int, test_size: float
) -> EncodedGeneration:
    """Read the generation's files (each checked against the fingerprint), drop rows without a target, encode.

    Raises:
        LineageDataError: a file is not in the fingerprint, a cell does not fit the lineage's transform, or a
            target value is not one of the lineage's classes.
    """
    _check_files(generation, fingerprint)
    labels: list[IntArray] = []
    try:  # column by column, as the rows with a class would be read (no dict per row)
        columns, rows = typed_columns(
            fingerprint, set(generation.files), transform, _with_class(transform, generation, labels)
        )
        if not rows:
            raise _no_target(generation)
        x = transform.encode_typed(columns, rows)
    except PredictionInputError as exc:
        raise LineageDataError(
            f"generation {generation.index} ({generation.partition}) does not fit the lineage's features: {exc.message}"
        ) from exc
    y = np.concatenate(labels)
    return EncodedGeneration(generation.index, x, y, _split(rows, test_size, random_seed, generation.index))


def held_out_tables(
    generation: Generation, fingerprint: Fingerprint, transform: RawTransform, random_seed: int, test_size: float
) -> tuple[list[pa.Table], list[str]]:
    """The raw rows of the generation's held-out split (the rows ``encode_generation`` holds out), a table per
    file, and their class labels: what a promotion rule evaluates any model of the lineage on.

    Raises:
        LineageDataError: as :func:`encode_generation` for its files and targets.
    """
    _check_files(generation, fingerprint)
    indices: list[IntArray] = []
    keep = _with_class(transform, generation, indices)
    # every file's count is needed before the split: the kept rows are held, as Arrow tables
    kept = [table.filter(keep(table)) for table in file_tables(fingerprint, set(generation.files))]
    rows = sum(table.num_rows for table in kept)
    if not rows:
        raise _no_target(generation)
    split = _split(rows, test_size, random_seed, generation.index)
    held: list[pa.Table] = []
    start = 0
    for table in kept:
        held.append(table.filter(pa.array(split[start : start + table.num_rows] == 1)))
        start += table.num_rows
    labels = np.concatenate(indices)[split == 1]
    return held, [transform.classes[i] for i in labels.tolist()]


def _check_files(generation: Generation, fingerprint: Fingerprint) -> tuple[FileEntry, ...]:
    """The fingerprint's entries of the generation's files (LineageDataError unless each is there)."""
    tokens = set(generation.files)
    entries = tuple(e for e in fingerprint.entries if e.token in tokens)
    if len(entries) != len(tokens):
        raise LineageDataError(f"generation {generation.index}: not every file it lists is in DATA_ROOT as listed")
    return entries


def _no_target(generation: Generation) -> LineageDataError:
    return LineageDataError(f"generation {generation.index} ({generation.partition}) has no row with a target")


def _with_class(transform: RawTransform, generation: Generation, labels: list[IntArray]) -> Keep:
    """The rows whose target is one of the lineage's classes (their class indices appended to ``labels``, a file
    at a time); a target value that is none of them is refused as :func:`_class_index` refuses it, the first in
    row order (a dictionary code is given in order of first occurrence)."""

    def keep(table: pa.Table) -> pa.Array:
        if transform.target_column not in table.column_names:
            return no_rows(table)
        values = table.column(transform.target_column).combine_chunks()
        if values.null_count == len(values):  # no label at all (Arrow's null type among them)
            return no_rows(table)
        # decoded first: a dictionary's order is its writer's, and coded again its codes follow the rows' order
        coded = pc.dictionary_encode(decoded(values))
        per_code = [_class_index(value, transform, generation.index) for value in coded.dictionary.to_pylist()]
        lut = np.array([-1 if index is None else index for index in [*per_code, None]], dtype=np.int64)
        codes = np.asarray(pc.fill_null(coded.indices, len(per_code)).to_numpy(), dtype=np.int64)
        index = lut[codes]
        labels.append(index[index >= 0])
        return pa.array(index >= 0)

    return keep


def check_new_columns(generations: list[Generation], fingerprint: Fingerprint, transform: RawTransform) -> None:
    """Every file of the new generations has the columns the lineage's features and target are made of, and
    every new generation a row whose target is one of the lineage's classes (as encoding reads it): bootstrap
    finds these before anything is written, not the features step after the run's first files.

    Raises:
        LineageDataError: naming the file and the missing columns (a new column is ignored: the lineage's
            features are frozen), a target value that is none of the lineage's classes, or a generation with
            no row with a target.
    """
    needed = sorted({column.name for column in transform.inputs} | {transform.target_column})
    owner = {token: generation for generation in generations for token in generation.files}
    entries = tuple(e for e in fingerprint.entries if e.token in owner)
    sub = Fingerprint(data_root=fingerprint.data_root, fingerprint=fingerprint_entries(entries), entries=entries)
    labelled = dict.fromkeys((generation.index for generation in generations), 0)
    for entry, data in read_verified(sub):
        table = parse_file(entry, data, fingerprint.data_root)
        missing = [name for name in needed if name not in set(table.column_names)]
        if missing:
            raise LineageDataError(
                f"data file {entry.relative_path} (a new generation) lacks column(s) {missing}; expected the "
                "lineage's columns: a new schema needs a cold start"
            )
        generation, labels = owner[entry.token], list[IntArray]()
        _with_class(transform, generation, labels)(table)  # a class the lineage lacks is refused here
        labelled[generation.index] += sum(int(found.size) for found in labels)
    for generation in generations:
        if not labelled[generation.index]:
            raise _no_target(generation)


def sync_history(
    history: RecordStore, schema: RecordSchema, encoded: dict[int, EncodedGeneration], generations: list[Generation]
) -> list[Generation]:
    """Append the encoded generations the history lacks; check those it holds. Returns the generations with
    their records' sha256 and row count filled in.

    Raises:
        LineageError: the history holds another generation under a number this lineage uses.
    """
    index = history.index()
    held = {g.generation: g for g in index.generations} if index is not None else {}
    done: list[Generation] = []
    for generation in generations:
        info = held.get(generation.index)
        if generation.index in encoded:
            # an existing generation of this number must hold exactly these bytes: the append checks it and
            # is then a no-op, and refuses (RECORDS_APPEND_ONLY) anything else
            try:
                info = _append(history, schema, encoded[generation.index], generation.index)
            except RecordsAppendError as exc:
                if generation.records_sha256 is not None:
                    raise
                raise _unrecorded(history, generation, exc) from exc
            if generation.records_sha256 not in (None, info.sha256):
                raise LineageError(
                    f"generation {generation.index} re-encoded to records with sha256 {info.sha256}; its parent "
                    f"recorded {generation.records_sha256} (the data, the transform or ml8s changed)"
                )
        elif info is None or info.sha256 != generation.records_sha256:
            raise LineageError(
                f"the lineage history lacks generation {generation.index} as its parent recorded it; expected "
                f"records with sha256 {generation.records_sha256} in {history.key('history.json')}"
            )
        done.append(generation.model_copy(update={"records_sha256": info.sha256, "records": info.rows}))
    return done


def _unrecorded(history: RecordStore, generation: Generation, exc: RecordsAppendError) -> RecordsAppendError:
    """Other rows under a generation no version recorded: a run from the same parent appended them and never
    committed (killed after its features step, before DATA_ROOT's file was complete): without a way out, every
    later warm start from that parent would fail here, forever."""
    return RecordsAppendError(
        f"{exc.message}; no version of the chain recorded generation {generation.index} ({generation.partition}): "
        "a run from the same parent appended it from other data and did not commit (it stopped, and its files "
        f"changed since; or a trainer with other data is at work now: wait for it). {_rebuild_hint(history)}"
    )


def _append(history: RecordStore, schema: RecordSchema, encoded: EncodedGeneration, number: int) -> GenerationInfo:
    """Append one generation; a racer of the same parent that appended first is not an error: the history is
    re-read and the same generation's bytes are then a no-op (other bytes stay RECORDS_APPEND_ONLY)."""
    attempt = 1
    while True:
        before = history.index()
        try:
            return history.append_generation(schema, encoded.records(), generation=number)
        except RecordsAppendError:
            if attempt == _APPEND_ATTEMPTS or history.index() == before:
                raise  # not a race: the history holds other bytes under this number
            attempt += 1


def _class_index(value: object, transform: RawTransform, generation: int) -> int | None:
    """The class index of a target value (None: no label)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        number = float(value)
        text = str(int(number)) if number.is_integer() else repr(number)
    else:
        text = str(value).strip()
        if text in MISSING_TOKENS:
            return None
        if text not in transform.classes:
            text = _as_number_label(text)
    if text not in transform.classes:
        raise LineageDataError(
            f"generation {generation}: target {transform.target_column!r} has {text!r}, not one of the lineage's "
            f"classes {list(transform.classes)}; a new class needs a cold start"
        )
    return transform.classes.index(text)


def _as_number_label(text: str) -> str:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def _split(n: int, test_size: float, seed: int, generation: int) -> npt.NDArray[np.int8]:
    split = np.zeros(n, dtype=np.int8)
    if n < 2:
        return split  # one row trains; nothing can be held out
    n_test = min(max(round(n * test_size), 1), n - 1)
    order = np.random.default_rng([seed, 3, generation]).permutation(n)
    split[order[:n_test]] = 1
    return split


def check_history_schema(history: RecordStore, schema: RecordSchema) -> None:
    index = history.index()
    if index is not None and index.record_schema != schema:
        raise LineageError(
            f"the lineage history at {history.key('')} has another record schema; expected the lineage's features"
        )


# A listed generation whose file is not the bytes its index lists (the store's own damage: a flipped bit, an edit),
# or is gone (a deleted record file or manifest).
DamagedRecords = RecordsChecksumError | RecordsTruncatedError | RecordsExtraBytesError | GenerationMissingError


def with_rebuild_hint(history: RecordStore, exc: DamagedRecords) -> DamagedRecords:
    """``exc`` (same code) saying how to heal: a listed generation is never rewritten, so every run would fail on
    the damaged file again; the history is derived data, rebuilt (and checked) from DATA_ROOT when absent."""
    return type(exc)(f"{exc.message}. {_rebuild_hint(history)}")


def _rebuild_hint(history: RecordStore) -> str:
    where = history.store.uri(history.prefix)
    return (
        "The lineage's record history is derived data and a listed generation is never rewritten, "
        f"so every warm start fails here until it is rebuilt: delete the history {where}/ (every file under it) "
        "and run again; the features step re-encodes each generation from DATA_ROOT and checks it against the "
        "sha256 its parent recorded (under Flyte run with FORCE_RERUN=true: the features task is cached)"
    )
