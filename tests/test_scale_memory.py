"""Memory at scale without changing a bit: freed buffers go back to the OS, training's labels and orders are narrow.

The 20M-row budget (docs/sizing.md) is the float32 matrix plus a few hundred MiB; these check that what was
narrowed or released to fit it trains, and types, exactly what it did before.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from ml8s.data import slices
from ml8s.data.columns import Column
from ml8s.data.dataset import Dataset, load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError
from ml8s.features import matrix, matrix_groups, matrix_mapped
from ml8s.features import prepared as row_preparing
from ml8s.features import rules as rule_fitting
from ml8s.features.matrix_read import read_matrix32
from ml8s.features.prepared import Prepared, prepare
from ml8s.features.rules import fit_rules
from ml8s.identity.params import validate_params
from ml8s.identity.variables import canonical_config
from ml8s.inference import rules as inference_rules
from ml8s.inference.rules import FeatureRule
from ml8s.memory import return_freed_memory
from ml8s.modeling.registry import cross_entropy_step
from ml8s.training.loop import Graphed, epoch_stepper

# Column-sized arrays freed under a small live allocation: glibc's dynamic mmap threshold (raised by the first
# freed 16 MiB block) puts them on the heap, which is trimmed only from its top; the live array pins it.
_PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np
    if sys.argv[1] == "fix":
        from ml8s.memory import return_freed_memory
        return_freed_memory()
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) // 1024
    big = np.ones(16 << 20, dtype=np.uint8)
    del big
    parts = [np.ones(3 << 20, dtype=np.uint8) for _ in range(60)]
    pin = np.ones(100_000, dtype=np.uint8)
    held = anon()
    del parts
    print(held - anon())
    """
)


def _returned_mib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_freed_column_buffers_go_back_to_the_os() -> None:
    assert _returned_mib("none") < 60  # the allocator's default keeps them: what the fix is for
    assert _returned_mib("fix") >= 150  # of 180 MiB freed


# Blocks under the fixed threshold are freed into the heap, pinned by a later small allocation: they stay resident
# until give_back() trims the heap (first line), and it does (second line).
_HEAP_PROBE = textwrap.dedent(
    """
    import numpy as np
    from ml8s.memory import give_back, return_freed_memory
    return_freed_memory()
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) // 1024
    parts = [np.ones(3 << 19, dtype=np.uint8) for _ in range(100)]
    pin = np.ones(100_000, dtype=np.uint8)
    held = anon()
    del parts
    freed = anon()
    give_back()
    print(held - freed)
    print(held - anon())
    """
)


def test_give_back_returns_the_heap_blocks_freed_under_the_threshold() -> None:
    done = subprocess.run([sys.executable, "-c", _HEAP_PROBE], capture_output=True, text=True, check=True)
    kept, returned = (int(line) for line in done.stdout.split())
    assert kept < 30  # 1.5 MiB blocks come from the heap: freeing them alone returns little of their 150 MiB
    assert returned >= 120  # give_back() returns them


def test_return_freed_memory_uses_the_system_pool_and_is_idempotent() -> None:
    return_freed_memory()
    return_freed_memory()
    assert pa.default_memory_pool().backend_name == "system"


def test_typed_columns_are_the_same_with_either_pool(small_data: Path) -> None:
    fingerprint = fingerprint_local(str(small_data))
    return_freed_memory()  # done once: it does not set the pool again
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    try:
        before = load_dataset(fingerprint)
    finally:
        pa.set_memory_pool(pa.system_memory_pool())
    now = load_dataset(fingerprint)
    assert [c.name for c in now.columns] == [c.name for c in before.columns]
    for x, y in zip(before.columns, now.columns, strict=True):
        assert x.kind == y.kind and x.category_list() == y.category_list()
        np.testing.assert_array_equal(x.values, y.values)


@pytest.mark.parametrize("rows", [1, 1000, 2**24 + 3])
def test_an_int32_randperm_is_the_int64_permutation(rows: int) -> None:
    """Training draws its epoch order in int32 (half the memory at 20M rows) from the seeded CPU generator."""
    wide = torch.randperm(rows, generator=torch.Generator().manual_seed(42))
    narrow = torch.randperm(rows, generator=torch.Generator().manual_seed(42), dtype=torch.int32)
    assert narrow.dtype == torch.int32 and torch.equal(wide, narrow.long())


@pytest.mark.parametrize("graphed", [False, True])
def test_narrow_labels_and_order_train_the_same_bits(graphed: bool) -> None:
    def run(labels: torch.dtype, index: torch.dtype) -> tuple[list[float], list[torch.Tensor]]:
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(2)
        x = torch.randn(300, 4, generator=generator)
        y = torch.randint(0, 3, (300,), generator=generator).to(labels)
        stepper = (
            Graphed(model, optimizer, x, y, 32, capture=False).run_epoch
            if graphed
            else epoch_stepper(cross_entropy_step, model, optimizer, x, y, 32)
        )
        sums = [float(stepper(torch.randperm(300, generator=generator).to(index))[0].item()) for _ in range(2)]
        return sums, [p.detach().clone() for p in model.parameters()]

    wide_sums, wide = run(torch.int64, torch.int64)
    for labels in (torch.int8, torch.int32):
        sums, params = run(labels, torch.int32)
        assert sums == wide_sums
        assert all(torch.equal(a, b) for a, b in zip(wide, params, strict=True))


def _prepared(data: Path, **overrides: str) -> tuple[Prepared, list[FeatureRule], dict[str, list[str]]]:
    params = validate_params(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "churned", **overrides}))
    prepared = prepare(load_dataset(fingerprint_local(str(data))), params)
    rules, kept = fit_rules(prepared, params)
    return prepared, rules, kept


def _write(path: Path, prepared: Prepared, rules: list[FeatureRule], kept: dict[str, list[str]], hand: bool) -> None:
    columns = {c.name: c for c in prepared.columns}
    matrix.write_encoded(str(path), rules, columns, kept, prepared.target, prepared.split, hand_over=hand)


def test_handed_over_rows_are_the_decoded_rows(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ml8s run`` trains on the rows its features step left, not on the file decoded again: the same arrays."""
    monkeypatch.setattr(matrix, "ROW_GROUP", 97)  # several row groups, and row slices across them
    monkeypatch.setattr(matrix_mapped, "_ROWS_PER_WRITE", 40)
    prepared, rules, kept = _prepared(small_data)
    path = tmp_path / "feature_matrix.parquet"
    _write(path, prepared, rules, kept, hand=True)
    handed = matrix_mapped.map_matrix32(str(path))
    assert not matrix_mapped._handed  # taken: a second map decodes the file
    decoded = matrix_mapped.map_matrix32(str(path))
    assert handed.names == decoded.names == [rule.name for rule in rules]
    for field in ("features", "target", "split"):
        got, want = getattr(handed, field), getattr(decoded, field)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert handed.features.flags.c_contiguous and len(handed.features) == len(prepared.target) > 3 * 97
    plain = tmp_path / "plain.parquet"
    _write(plain, prepared, rules, kept, hand=False)
    assert plain.read_bytes() == path.read_bytes()  # handing over changes no byte of the file


@pytest.mark.parametrize("overlap", [False, True], ids=["one group at a time", "written while the next is encoded"])
def test_row_groups_of_features_alive_at_a_time(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    """Row groups are encoded into one group buffer, used again for each group (at 2M rows a group is 116 MiB of
    peak); where the writing overlaps the encoding, into two in turn, and a buffer is encoded again only once its
    group is written (slow writes here: a buffer overwritten while written would change the file's bytes)."""
    monkeypatch.setattr(matrix, "ROW_GROUP", 97)
    monkeypatch.setattr(matrix, "overlaps", lambda rows, features, train_rows: overlap)
    prepared, rules, kept = _prepared(small_data)
    made: list[int] = []
    real_take = matrix_groups.GroupBuffers.take

    def take(self: matrix_groups.GroupBuffers, rows: int) -> np.ndarray:
        out = real_take(self, rows)
        made.append(len(self._groups))
        return out

    real_write, real_scratch = matrix._write_taken, matrix_mapped.SplitRows.write

    def slow_write(*args: object) -> None:
        time.sleep(0.002)
        real_write(*args)  # type: ignore[arg-type]

    def slow_scratch(*args: object) -> None:
        time.sleep(0.002)
        real_scratch(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(matrix_groups.GroupBuffers, "take", take)
    monkeypatch.setattr(matrix, "_write_taken", slow_write)
    monkeypatch.setattr(matrix_mapped.SplitRows, "write", slow_scratch)
    for hand in (True, False):
        _write(tmp_path / f"{hand}.parquet", prepared, rules, kept, hand=hand)
    matrix_mapped._handed.clear()
    assert len(made) == 2 * -(-len(prepared.target) // 97) > 4
    assert max(made) == (2 if overlap else 1)
    monkeypatch.undo()
    monkeypatch.setattr(matrix, "ROW_GROUP", 97)
    monkeypatch.setattr(matrix, "overlaps", lambda rows, features, train_rows: not overlap)
    _write(tmp_path / "other.parquet", prepared, rules, kept, hand=False)
    assert (tmp_path / "other.parquet").read_bytes() == (tmp_path / "False.parquet").read_bytes()
    assert (tmp_path / "True.parquet").read_bytes() == (tmp_path / "False.parquet").read_bytes()


def test_writing_overlaps_encoding_only_where_a_group_hides_in_the_fitting_peak() -> None:
    """The demo's 32 features (80% of the rows train): at 2M rows a group more would raise the step's peak, at 20M
    it hides under the fitting's; 200 features at 20M would not, nor 32 at 20M with only 1M training rows."""
    assert not matrix.overlaps(2_000_000, 32, 1_600_000)
    assert matrix.overlaps(20_000_000, 32, 16_000_000)
    assert not matrix.overlaps(20_000_000, 200, 16_000_000)
    assert not matrix.overlaps(20_000_000, 32, 1_000_000)


def test_rows_handed_over_for_a_file_rewritten_since_are_not_used(small_data: Path, tmp_path: Path) -> None:
    prepared, rules, kept = _prepared(small_data)
    other, other_rules, other_kept = _prepared(small_data, SAMPLE_ROWS="50", MAX_FEATURES="3")
    path = tmp_path / "feature_matrix.parquet"
    _write(path, prepared, rules, kept, hand=True)
    _write(path, other, other_rules, other_kept, hand=False)  # the file now holds other rows
    mapped = matrix_mapped.map_matrix32(str(path))
    assert mapped.names == [rule.name for rule in other_rules] and len(mapped.target) == 50
    np.testing.assert_array_equal(mapped.target, other.target[np.argsort(other.split, kind="stable")])
    assert mapped.features.shape == (50, 3) and not matrix_mapped._handed


@pytest.mark.parametrize("classes", [2, 3, 9])
def test_held_out_figures_are_the_whole_log_softmax_figures(classes: int) -> None:
    """The per-epoch held-out figures, computed in place, are the floats of the full log-softmax (epochs.json)."""
    from ml8s.training.epochs import held_out_figures

    torch.manual_seed(classes)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, classes))
    x = torch.randn(5000, 6, generator=torch.Generator().manual_seed(1)) * 4
    rows = torch.arange(0, 5000, 2, dtype=torch.int32)
    labels = np.random.default_rng(classes).integers(0, classes, len(rows))
    with torch.no_grad():
        logits = model(x[rows]).numpy().astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    picked = np.maximum(log_probs[np.arange(len(labels)), labels], np.log(1e-15))
    want = (float(-picked.mean()), float((logits.argmax(axis=1) == labels).mean()))
    assert held_out_figures(model, x, rows, labels) == want


def _resident_kib(address: int) -> int:
    """Rss of the mapping that starts at ``address``, from /proc/self/smaps."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.split("-", 1)[0] == f"{address:x}":
            return next(int(rss.split()[1]) for rss in lines[i + 1 :] if rss.startswith("Rss:"))
    raise AssertionError(f"no mapping at {address:#x}")


def test_release_drops_one_split_of_the_mapped_rows_from_the_process(small_data: Path, tmp_path: Path) -> None:
    """Training touches the training rows, evaluation the held-out rows: each can drop the other's pages, so the
    matrix is never resident whole (at 2M rows, 195 of its 244 MiB while training)."""
    prepared, rules, kept = _prepared(small_data)
    pick = np.arange(40_000) % len(prepared.target)  # 40,000 rows: pages enough to count
    big = prepared.model_copy(
        update={
            "columns": tuple(c.take(pick) for c in prepared.columns),
            "target": prepared.target[pick],
            "split": prepared.split[pick],
        }
    )
    path = tmp_path / "feature_matrix.parquet"
    _write(path, big, rules, kept, hand=False)
    mapped = matrix_mapped.map_matrix32(str(path))
    assert mapped.region is not None
    address = mapped.features.ctypes.data
    row_kib = mapped.features.shape[1] * 4 / 1024
    held_out = int(np.count_nonzero(mapped.split == 1))
    assert 0 < held_out < len(mapped.split) and list(mapped.split) == sorted(mapped.split)
    total = float(mapped.features.sum(dtype=np.float64))  # touches every page
    assert _resident_kib(address) >= len(mapped.split) * row_kib - 4
    mapped.release(0)
    assert abs(_resident_kib(address) - held_out * row_kib) <= 8  # the held-out rows, and at most a shared page
    mapped.release(1)
    assert _resident_kib(address) <= 8
    assert float(mapped.features.sum(dtype=np.float64)) == total  # the rows come back from the file unchanged


def test_training_on_rows_grouped_by_split_gives_the_bits_of_the_file_order(tmp_path: Path) -> None:
    """The mapping groups training rows before held-out rows; gathering by the split's indices picks the same
    rows in the same order, so weights and metrics are those of the file's own order, pages released or not."""
    from conftest import make_context, write_small_churn

    from ml8s.pipeline.features import compute_features
    from ml8s.training import fit

    ctx = make_context(write_small_churn(tmp_path / "data", rows=3000), tmp_path / "root", epochs="3")
    features = str(tmp_path / "features")
    compute_features(ctx.spec, features)
    fit.train(ctx.spec, features, str(tmp_path / "grouped"))

    def file_order(path: str) -> matrix_mapped.MappedMatrix:
        rows, target, split, names = read_matrix32(path)
        return matrix_mapped.MappedMatrix(rows, target.astype(np.int32), split.astype(np.int8), names)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fit, "map_matrix32", file_order)
        fit.train(ctx.spec, features, str(tmp_path / "file_order"))
    grouped = matrix_mapped.map_matrix32(str(Path(features) / "feature_matrix.parquet"))
    assert list(grouped.split) != list(file_order(str(Path(features) / "feature_matrix.parquet")).split)
    for name in ("model_native.safetensors", "training_state.safetensors", "metrics.json"):
        assert (tmp_path / "grouped" / name).read_bytes() == (tmp_path / "file_order" / name).read_bytes(), name


def test_a_refused_release_leaves_the_rows_resident_and_usable() -> None:
    """Releasing is advice: where the kernel refuses it (locked pages), training goes on with the rows resident."""

    class Refusing:
        def madvise(self, *args: int) -> None:
            raise OSError(22, "Invalid argument")

    rows = np.arange(8192 * 4, dtype=np.float32).reshape(-1, 4)
    split = np.repeat(np.array([0, 1], dtype=np.int8), [6144, 2048])
    target = np.zeros(len(rows), dtype=np.int32)
    mapped = matrix_mapped.MappedMatrix(rows, target, split, ["a", "b", "c", "d"], Refusing())  # type: ignore[arg-type]
    mapped.release(0)
    mapped.release(1)
    assert float(mapped.features.sum()) == float(rows.sum())


@pytest.mark.parametrize(("threads", "bound"), [(1, 17), (2, 21)])
def test_preparing_rows_holds_four_row_arrays_at_most(
    monkeypatch: pytest.MonkeyPatch, threads: int, bound: int
) -> None:
    """prepare(consume=True) at its peak holds, beside the columns it compacts in place, the kept-row mask, the kept
    rows' indices (int64) and their class indices (int32) and split (int8): 14.4 bytes a row measured here, with
    one thread or two. It held the class indices of every row, a second copy of the kept rows' and a Python list
    of them too (36 bytes a row here; about 200 MiB more at the 20M-row snapshot step's peak); then, with the class
    indices and the split as int64, 22.4 bytes a row (one thread) and 27.7 (two: a categorical's bucket codes
    beside a numeric's missing-value mask came on top).

    The rows are moved a slice at a time, so no column-sized copy comes on top (26 bytes a row was the bound while
    a column was copied whole)."""
    monkeypatch.setattr(row_preparing, "COLUMN_THREADS", threads)
    rows = 1 << 20
    rng = np.random.default_rng(0)
    data = Dataset(
        columns=(
            Column(
                name="churned",
                kind="categorical",
                values=rng.integers(-1, 2, rows).astype(np.int32),
                categories=pa.array(["no", "yes"]),
            ),
            Column(
                name="plan",
                kind="categorical",
                values=rng.integers(-1, 3, rows).astype(np.int32),
                categories=pa.array(["a", "b", "c"]),
            ),
            Column(name="x", kind="numeric", values=rng.standard_normal(rows)),
        ),
        rows=rows,
        rows_per_file={"a.csv": rows},
    )
    params = validate_params(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "churned"}))
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        before = tracemalloc.get_traced_memory()[0]
        prepared = prepare(data, params, consume=True)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert len(prepared.target) > rows // 2 and peak / rows < bound, peak / rows


@pytest.mark.parametrize("slice_rows", [1, 7, 1 << 20])
def test_codes_counted_and_mapped_a_slice_at_a_time_are_the_whole_columns(
    monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    """Counting and bucketing a categorical column's codes a slice at a time (no int64 copy of every row) gives
    what one numpy call over the whole column gave, at any slice size."""
    monkeypatch.setattr(slices, "CODE_SLICE", slice_rows)
    codes = np.random.default_rng(3).integers(-1, 5, 1000).astype(np.int32)
    codes[:3] = 4  # code 3 never occurs after them
    codes[codes == 3] = 2
    whole = np.asarray(codes, dtype=np.int64)
    assert np.array_equal(slices.code_counts(codes, 5), np.bincount(whole + 1, minlength=6))
    lut = np.array([0, 2, 2, 1, 3, 4], dtype=np.int32)  # code -1 takes the last entry
    assert np.array_equal(slices.mapped_codes(lut, codes), lut[whole])
    column = Column(name="c", kind="categorical", values=codes, categories=pa.array(list("abcde")))
    kept = {"a", "c", "e", "__missing__"}
    buckets = inference_rules.bucket(column, kept)
    present = inference_rules.present_labels(column, kept)  # from the code counts, the rows not bucketed
    assert present == sorted({buckets.labels[i] for i in np.unique(buckets.rows)})
    assert present == ["__missing__", "__other__", "a", "c", "e"]
    without_missing = Column(name="c", kind="categorical", values=np.abs(codes), categories=column.categories)
    assert inference_rules.present_labels(without_missing, kept) == ["__other__", "a", "c", "e"]
    assert inference_rules.present_labels(without_missing, {"a", "b", "c", "d", "e"}) == ["a", "b", "c", "e"]


@pytest.mark.parametrize("slice_rows", [1, 7, 1 << 20])
def test_rows_compacted_a_slice_at_a_time_are_the_rows_taken(monkeypatch: pytest.MonkeyPatch, slice_rows: int) -> None:
    """Moving the kept rows to the front of a column's own array a slice at a time (no column-sized copy) gives
    the rows :meth:`Column.take` copies, for a few or most rows kept, numbers or codes, at any slice size."""
    monkeypatch.setattr(slices, "CODE_SLICE", slice_rows)
    rng = np.random.default_rng(11)
    for share in (0.02, 0.5, 0.999, 1.0):
        rows = np.flatnonzero(rng.random(5000) < share)
        for values in (rng.standard_normal(5000), rng.integers(-1, 9, 5000).astype(np.int32)):
            kind = "numeric" if values.dtype == np.float64 else "categorical"
            taken = Column(name="c", kind=kind, values=values.copy()).take(rows)
            compacted = Column(name="c", kind=kind, values=values).compact(rows)
            assert compacted.values.dtype == values.dtype and np.array_equal(compacted.values, taken.values)
            assert np.shares_memory(compacted.values, values)  # moved in place, not copied


def test_candidates_fitted_from_their_training_rows_are_the_encoded_columns_training_rows(small_data: Path) -> None:
    """Fitting makes each candidate's training rows only: they are ``feature_values`` of the whole column taken at
    the training rows (what the matrix encodes), and the largest magnitude is that of the whole imputed column."""
    rng = np.random.default_rng(5)
    rows = 5000
    numbers = rng.standard_normal(rows) * 1e3 - 700
    numbers[rng.random(rows) < 0.1] = np.nan
    flags = (rng.random(rows) < 0.5).astype(np.float64)
    flags[:7] = np.nan
    synthetic = [
        Column(name="n", kind="numeric", values=numbers),
        Column(name="all_missing_but_one", kind="numeric", values=np.where(np.arange(rows) == 3, -5.0, np.nan)),
        Column(name="b", kind="boolean", values=flags),
        Column(
            name="c",
            kind="categorical",
            values=rng.integers(-1, 40, rows).astype(np.int32),
            categories=pa.array([f"k{i:02d}" for i in range(40)]),
        ),
    ]
    prepared, _, _ = _prepared(small_data)
    train = rng.random(rows) < 0.8
    for typed, in_train in ((prepared.columns, prepared.split == 0), (synthetic, train)):
        for column in typed:
            kept: dict[str, list[str]] = {}
            # each feature is made in the thread's work arrays, valid until the next is asked for: copied as made
            work = rule_fitting._Work(len(in_train), int(np.count_nonzero(in_train)))
            fitting = rule_fitting._fit_column(column, slices.Picked(in_train), kept, work)
            made = [(r, _as_floats(observed), p) for r, observed, p in fitting]
            assert made
            buckets = inference_rules.bucket(column, kept[column.name]) if column.kind == "categorical" else None
            for rule, observed, peak in made:
                values = inference_rules.feature_values(rule, column, buckets)
                assert observed.dtype == np.float64 and np.array_equal(observed, values[in_train]), rule.name
                expected = max(float(values.max(initial=0.0)), -float(values.min(initial=0.0)))
                assert peak == (expected if rule.kind == "numeric" else 1.0), rule.name


def _as_floats(observed: np.ndarray | rule_fitting.Flags) -> np.ndarray:
    """A fitted feature's training values as float64, copied (fitting reuses its arrays for the next feature)."""
    if isinstance(observed, rule_fitting.Flags):
        assert rule_fitting.flag_mean_and_variance(observed.flags, np.empty(len(observed.flags))) == (
            rule_fitting.mean_and_variance(observed.flags.astype(np.float64))
        )
        return observed.flags.astype(np.float64)
    return observed.copy()


@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 127, 128, 129, 8191, 8192, 8193, 65_537, 1_000_003])
def test_flag_mean_and_variance_are_the_float_columns_bits(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0/1 feature's mean and variance from its booleans: numpy's ``mean`` and ``var`` of the float column, bit
    for bit, at every density (none, all, one, a few, half) and across numpy's pairwise blocking, whatever the
    slices the squared deviations are laid out in."""
    monkeypatch.setattr(slices, "CODE_SLICE", 1000)
    rng = np.random.default_rng(rows)
    densities = {"none": 0.0, "all": 1.1, "sparse": 1e-3, "third": 0.3, "half": 0.5, "dense": 0.97}
    for name, density in densities.items():
        flags = rng.random(rows) < density
        if name == "sparse":
            flags[rows // 2] = True
        floats = flags.astype(np.float64)
        made = rule_fitting.flag_mean_and_variance(flags, np.full(rows, np.nan))
        assert made == (float(floats.mean()), float(floats.var())), name
    with pytest.warns(RuntimeWarning):  # no rows: NaN, and numpy's warnings, as the float column gives
        assert np.isnan(rule_fitting.flag_mean_and_variance(np.zeros(0, bool), np.empty(0))).all()


@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 127, 128, 129, 8191, 8192, 8193, 65_537, 1_000_003])
def test_mean_and_variance_in_place_are_numpys_bits(rows: int) -> None:
    """Fitting computes a feature's training mean and variance in the array of its training rows (no temporary as
    large): the same floats as numpy's ``mean`` and ``var``, across the sizes where numpy's pairwise summation
    changes its blocking."""
    rng = np.random.default_rng(rows)
    cases = {
        "normal": rng.standard_normal(rows) * 1e3 - 700,
        "one-hot": (rng.random(rows) < 0.3).astype(np.float64),
        "large": rng.standard_normal(rows) * 1e150,  # squares overflow to infinity both ways
        "constant": np.full(rows, 0.1),
        "offset integers": rng.integers(0, 100, rows).astype(np.float64) + 1e9,
        "tiny": rng.standard_normal(rows) * 3.3e-300,
    }
    for name, values in cases.items():
        mean, variance = rule_fitting.mean_and_variance(values.copy())
        assert (mean, variance) == (float(values.mean()), float(values.var())), name


def test_columns_fitted_on_threads_give_the_rules_and_the_error_of_one_thread(
    small_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Columns are fitted two at a time; the rules, the kept categories and, when columns fail, the error (the
    first failing column's, in column order) are those of fitting them one after the other."""
    params = validate_params(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "churned"}))
    prepared = prepare(load_dataset(fingerprint_local(str(small_data))), params)
    fitted = {}
    for threads in (1, 2):
        monkeypatch.setattr(rule_fitting, "COLUMN_THREADS", threads)
        fitted[threads] = fit_rules(prepared, params)
    assert fitted[1] == fitted[2]
    assert len({rule.source for rule in fitted[2][0]}) > 2 and fitted[2][1]  # several columns, a categorical

    rows = 4000
    rng = np.random.default_rng(3)
    huge = [Column(name=f"{n}_huge", kind="numeric", values=rng.standard_normal(rows) * 1e200) for n in "ab"]
    fine = Column(name="0_fine", kind="numeric", values=rng.standard_normal(rows))
    target = Column(name="churned", kind="boolean", values=(rng.random(rows) < 0.5).astype(np.float64))
    data = Dataset(columns=(fine, *huge, target), rows=rows, rows_per_file={"part.csv": rows})
    failing = prepare(data, params)
    for threads in (1, 2):
        monkeypatch.setattr(rule_fitting, "COLUMN_THREADS", threads)
        with pytest.raises(DataError, match="column 'a_huge' has values too large"):
            fit_rules(failing, params)


def test_training_state_does_not_record_what_other_code_drew_from_the_global_rngs(tmp_path: Path) -> None:
    """Training draws nothing from Python's or numpy's global RNG; something else in the process may (a retry's
    jitter in another thread draws from ``random``). The recorded states are those training began with, so such
    draws during training change no byte of training_state.safetensors."""
    import random

    from conftest import make_context, write_small_churn

    from ml8s.pipeline.features import compute_features
    from ml8s.training import fit

    ctx = make_context(write_small_churn(tmp_path / "data", rows=600), tmp_path / "root", epochs="2")
    features = str(tmp_path / "features")
    compute_features(ctx.spec, features)
    fit.train(ctx.spec, features, str(tmp_path / "clean"))
    done = threading.Event()

    def draw() -> None:  # another thread of the process, drawing all through the training
        while not done.is_set():
            random.random()
            np.random.rand()

    drawer = threading.Thread(target=draw, daemon=True)
    drawer.start()
    try:
        fit.train(ctx.spec, features, str(tmp_path / "drawn"))
    finally:
        done.set()
        drawer.join()
    for name in ("training_state.safetensors", "model_native.safetensors"):
        assert (tmp_path / "clean" / name).read_bytes() == (tmp_path / "drawn" / name).read_bytes(), name


def test_masked_into_is_boolean_indexing_across_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """``masked_into`` gives ``values[mask]`` whatever the slices' boundaries, every kind of mask included (none
    kept, all kept, a slice keeping nothing), and leaves ``out`` past the kept rows untouched."""
    monkeypatch.setattr(slices, "CODE_SLICE", 7)
    rng = np.random.default_rng(3)
    values = rng.standard_normal(50)
    for mask in (rng.random(50) < 0.3, np.zeros(50, bool), np.ones(50, bool), np.arange(50) >= 21):
        out = np.full(60, -1.0)
        made = slices.masked_into(values, mask, out)
        assert np.array_equal(made, values[mask]) and (not len(made) or np.shares_memory(made, out))
        assert (out[len(made) :] == -1.0).all()
    codes = rng.integers(-1, 9, 50).astype(np.int32)
    mask = rng.random(50) < 0.5
    assert np.array_equal(slices.masked_into(codes, mask, np.empty(50, np.int32)), codes[mask])


@pytest.mark.parametrize("rows", [2, 3, 1000, 65_537])
def test_split_is_the_int64_permutations_split(rows: int) -> None:
    """The split is drawn from an int32 shuffle of the row indices: the same rows as numpy's int64
    ``permutation`` of the same generator, which the split was always drawn from (the artifacts' bytes); held as
    int8 (the values 0 and 1)."""
    for seed in (0, 42, 2**40):
        order = np.random.default_rng([seed, 1]).permutation(rows)
        expected = np.zeros(rows, dtype=np.int64)
        expected[order[: row_preparing._test_rows(rows, 0.2)]] = 1
        made = row_preparing._split(rows, 0.2, seed)
        assert made.dtype == np.int8 and np.array_equal(made, expected)


def test_slice_helpers_match_whole_array_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    """``first_infinite``, ``taken_into`` and ``Column.all_missing`` give what the whole-array operations gave,
    wherever the slices' boundaries fall (a hit on a boundary, in the last short slice, or none)."""
    monkeypatch.setattr(slices, "CODE_SLICE", 8)
    values = np.arange(40, dtype=np.float64)
    assert slices.first_infinite(values) is None
    for at in (0, 7, 8, 39):
        hit = values.copy()
        hit[at] = -np.inf
        hit[min(at + 3, 39)] = np.inf
        assert slices.first_infinite(hit) == at
    rows = np.array([0, 3, 9, 17, 39, 39, 22], dtype=np.int64)
    codes = np.arange(40, dtype=np.int32) * 3 - 1
    made = slices.taken_into(codes, rows, np.empty(len(rows), dtype=np.int64))
    assert made.dtype == np.int64 and made.tolist() == codes[rows].tolist()
    nan = np.full(40, np.nan)
    assert Column(name="n", kind="numeric", values=nan).all_missing()
    for at in (0, 8, 39):
        one = nan.copy()
        one[at] = 0.0
        assert not Column(name="n", kind="numeric", values=one).all_missing()
        coded = np.full(40, -1, dtype=np.int32)
        coded[at] = 0
        assert not Column(name="c", kind="categorical", values=coded, categories=pa.array(["a"])).all_missing()
    assert Column(
        name="c", kind="categorical", values=np.full(40, -1, np.int32), categories=pa.array(["a"])
    ).all_missing()


def test_a_columns_code_counts_are_counted_once_and_never_carried_to_another() -> None:
    """Preparing and fitting ask a categorical column for its counts many times: counted once per column, and a
    column made from it (compacted, taken, a part) counts its own rows."""
    codes = np.array([0, 1, -1, 1, 2, 2, 2, -1], dtype=np.int32)
    column = Column(name="c", kind="categorical", values=codes.copy(), categories=pa.array(["a", "b", "c"]))
    first = column.code_counts()
    assert first.tolist() == [2, 1, 2, 3] and column.code_counts() is first
    assert column.counts() == {None: 2, "a": 1, "b": 2, "c": 3}
    assert column.part(4, 8).code_counts().tolist() == [1, 0, 0, 3]
    assert column.take(np.array([0, 1])).code_counts().tolist() == [0, 1, 1, 0]
    kept = column.compact(np.array([1, 3, 6], dtype=np.int64))
    assert kept.code_counts().tolist() == [0, 0, 2, 1]
    # the compacted column's own array changed: its counts are made again, never the stale ones
    assert column.code_counts().tolist() == slices.code_counts(column.values, 3).tolist() != first.tolist()


@pytest.mark.parametrize("slice_rows", [1, 8, 1 << 17])
def test_picked_rows_are_the_boolean_take(monkeypatch: pytest.MonkeyPatch, slice_rows: int) -> None:
    """``picked_into`` (each slice's kept rows by index, made once for every column fitted) gives ``values[mask]``
    for float, code and boolean columns, whatever the slices' size, with no row kept, every row or some."""
    monkeypatch.setattr(slices, "CODE_SLICE", slice_rows)
    rng = np.random.default_rng(slice_rows)
    for mask in (rng.random(1001) < 0.8, np.zeros(1001, dtype=bool), np.ones(1001, dtype=bool)):
        picked = slices.Picked(mask)
        assert picked.count == int(np.count_nonzero(mask))
        for values in (rng.standard_normal(1001), rng.integers(-1, 9, 1001).astype(np.int32), rng.random(1001) < 0.3):
            out = np.full(1001, values[0])
            assert np.array_equal(slices.picked_into(values, picked, out), values[mask])
