"""The data path at scale: parse once, bounded-memory matrix files, bad data found late in a big file, the loop.

The sizes here are small enough for the suite; bench/bench_scale.py measures the 0.5M/2M/20M-row runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from ml8s.data import demo
from ml8s.data.dataset import load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError
from ml8s.features import loaded
from ml8s.features.column_names import SPLIT, TARGET
from ml8s.features.matrix import ROW_GROUP, write_encoded
from ml8s.features.matrix_mapped import map_matrix32
from ml8s.features.matrix_read import read_matrix, read_matrix32, read_split32
from ml8s.features.prepared import prepare
from ml8s.features.rules import encode, fit_rules
from ml8s.identity.params import validate_params
from ml8s.identity.variables import canonical_config
from ml8s.modeling.registry import cross_entropy_step
from ml8s.pipeline.run import run_pipeline
from ml8s.training.loop import epoch_stepper

BIG_ROWS = 2_000_000
BAD_ROW = BIG_ROWS - 7  # a data row near the end: 1 = the first row after the header
# sha256 of every file of `generate(rows, files, seed)` as the generator wrote them before it streamed: the demo
# data's bytes (and so every demo RUN_ID) must not move.
DEMO_DIGESTS = {
    (3000, 3, 7): "4e58545f6068a9adbc9135e1212040e7bee0b299376d0e0ba78ebee4c687931c",
    (1001, 2, 11): "a0796172760faf6f12d1255b4e5bf3dfc9259b2785e7d88f4b6e998baaa5f41c",
}
# generations 0-2 of 50 rows, seed 7
GENERATIONS_DIGEST = "255749717929c316c0446b01f889e68c7e4b8da7a59adade2a2254bee61d4827"


def _params(**overrides: str) -> object:
    raw = {"DATA_ROOT": "/d", "TARGET_COLUMN": "churned", **overrides}
    return validate_params(canonical_config(raw))


@pytest.mark.parametrize(("rows", "files", "seed"), sorted(DEMO_DIGESTS))
def test_demo_bytes_are_what_they_were(rows: int, files: int, seed: int) -> None:
    digest = hashlib.sha256()
    for demo_file in demo.generate(rows, files, seed):
        digest.update(demo_file.name.encode() + b"\0" + demo_file.content)
    assert digest.hexdigest() == DEMO_DIGESTS[(rows, files, seed)]


def test_demo_generations_bytes_are_what_they_were() -> None:
    digest = hashlib.sha256()
    for demo_file in demo.generate_generations(2, 50, 7):
        digest.update(demo_file.name.encode() + b"\0" + demo_file.content)
    assert digest.hexdigest() == GENERATIONS_DIGEST


def test_demo_text_is_made_in_chunks_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = [f.content for f in demo.generate(1234, 2, 5)]
    monkeypatch.setattr(demo, "_CHUNK", 97)  # many chunks, one ending mid-file
    assert [f.content for f in demo.generate(1234, 2, 5)] == whole


@pytest.fixture(scope="module")
def big_bad_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2M-row CSV (~20 MB, made with bytes arithmetic) whose only bad cell, an overflowing number, is near the end."""
    data = tmp_path_factory.mktemp("big") / "data"
    data.mkdir()
    good = b"".join(b"%d,%d.5,%s\n" % (i % 97, i % 13, b"yes" if i % 3 else b"no") for i in range(1000))
    body = bytearray(b"n,x,churned\n" + good * (BIG_ROWS // 1000))
    lines = body.split(b"\n")
    lines[BAD_ROW] = b"5,1e999,no"
    (data / "part-00000.csv").write_bytes(b"\n".join(lines))
    return data


def test_bad_cell_near_the_end_of_a_big_file_fails_before_any_write(big_bad_file: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {"DATA_ROOT": str(big_bad_file), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root), "EPOCHS": "1"}
    with pytest.raises(DataError) as caught:
        run_pipeline(env)
    message = caught.value.message
    assert "part-00000.csv" in message and "'x'" in message and f"data row {BAD_ROW}" in message
    assert "'1e999'" in message or "1e999" in message
    written = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    assert not [p for p in written if "runs" in p.parts], written


def test_bad_cell_in_a_late_block_names_its_row_in_the_file(
    big_bad_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsed in ~1 MiB blocks, the bad cell is in the file's last block: its row counts every block before it."""
    from ml8s.data import csv_text

    monkeypatch.setattr(csv_text, "BLOCK", 1 << 20)
    with pytest.raises(DataError) as caught:
        load_dataset(fingerprint_local(str(big_bad_file)))
    message = caught.value.message
    assert "part-00000.csv" in message and "'x'" in message and f"data row {BAD_ROW} " in message


@pytest.mark.parametrize("cell", ["inf", "NAN", "-nan", "abc", "1_000", "0x10", "5e", " 7 ", "NA"])
def test_a_cell_past_the_first_cells_of_a_block_types_the_column_as_the_pattern_does(cell: str) -> None:
    """The fast path samples a block's first cells; a cell after them must count exactly as it would there."""
    from ml8s.data.columns import present_text
    from ml8s.data.csv_columns import Numbers, chunk_route, number_mask

    cells = pa.array([str(i) for i in range(500)] + [cell] + ["1.5"] * 10)
    late, early = chunk_route(cells)[0], chunk_route(pa.array([cell] + cells.to_pylist()[:500] + ["1.5"] * 10))[0]
    numbers = bool(pc.all(pc.or_(number_mask(present_text(cells)), pc.is_null(present_text(cells)))).as_py())
    assert isinstance(late, Numbers) == isinstance(early, Numbers)
    assert isinstance(late, Numbers) == numbers


def test_snapshot_and_features_parse_the_files_once(small_data: Path, tmp_path: Path) -> None:
    calls: list[str] = []
    real = loaded.load_dataset

    def counting(fingerprint: object, **options: object) -> object:
        calls.append(str(fingerprint))
        return real(fingerprint, **options)  # type: ignore[arg-type]

    env = {"DATA_ROOT": str(small_data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path / "r")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loaded, "load_dataset", counting)
        run_pipeline({**env, "EPOCHS": "1"})
    assert len(calls) == 1
    assert not loaded._held  # taken by the features step: not kept alive while the model trains


def _matrix_bytes_before(
    path: Path, matrix: np.ndarray, names: list[str], target: np.ndarray, split: np.ndarray
) -> None:
    """How the matrix file was written before it was written a row group at a time."""
    columns = {name: pa.array(matrix[:, i].astype(np.float32)) for i, name in enumerate(names)}
    columns[TARGET] = pa.array(target.astype(np.int32))
    columns[SPLIT] = pa.array(split.astype(np.int8))
    pq.write_table(
        pa.table(columns), path, compression="zstd", compression_level=3, use_dictionary=False, write_statistics=True
    )


def _address(region: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(region))


@pytest.mark.parametrize("rows", [1000, ROW_GROUP + 17])
def test_matrix_file_bytes_are_unchanged_by_row_groups(small_data: Path, tmp_path: Path, rows: int) -> None:
    params = _params(MAX_FEATURES="5")
    base = prepare(load_dataset(fingerprint_local(str(small_data))), params)
    pick = np.arange(rows) % len(base.target)
    prepared = base.model_copy(
        update={
            "columns": tuple(c.take(pick) for c in base.columns),
            "target": base.target[pick],
            "split": base.split[pick],
        }
    )
    rules, kept = fit_rules(prepared, params)
    matrix, _ = encode(prepared, params)
    names = [rule.name for rule in rules]
    before, now = tmp_path / "before.parquet", tmp_path / "now.parquet"
    _matrix_bytes_before(before, matrix, names, prepared.target, prepared.split)
    write_encoded(str(now), rules, {c.name: c for c in prepared.columns}, kept, prepared.target, prepared.split)
    assert now.read_bytes() == before.read_bytes()
    features32, target, split, read_names = read_matrix32(str(now))
    assert read_names == names and features32.dtype == np.float32 and features32.flags.c_contiguous
    np.testing.assert_array_equal(features32, matrix.astype(np.float32))
    np.testing.assert_array_equal(read_matrix(str(now))[0], matrix.astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(target, prepared.target)
    np.testing.assert_array_equal(read_split32(str(now), 1), matrix.astype(np.float32)[split == 1])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(scratch))
        mapped = map_matrix32(str(now))
    assert mapped.region is not None and mapped.names == names and mapped.features.flags.c_contiguous
    grouped = np.argsort(split, kind="stable")  # training rows first, then held-out rows, each in file order
    np.testing.assert_array_equal(mapped.features, features32[grouped])
    np.testing.assert_array_equal(mapped.target, target[grouped])
    np.testing.assert_array_equal(mapped.split, split[grouped])
    assert (mapped.target.dtype, mapped.split.dtype) == (np.int32, np.int8)  # the file's own types: not int64
    # training's tensor is the mapping itself
    assert torch.from_numpy(mapped.features).data_ptr() == mapped.features.ctypes.data == _address(mapped.region)
    assert not list(scratch.iterdir())  # an unnamed file: nothing to leave behind


def test_held_out_logits_do_not_depend_on_rows_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.json is hashed: evaluating the held-out rows a pass at a time must give the one-pass floats."""
    from ml8s.training import epochs

    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    x = torch.randn(5000, 6, generator=torch.Generator().manual_seed(9))
    rows = torch.randperm(5000, generator=torch.Generator().manual_seed(8))[:3001]
    whole = epochs.eval_logits(model, x, rows)
    monkeypatch.setattr(epochs, "EVAL_ROWS", 1000)  # 3001 rows: a one-row last pass would differ in the last bit
    assert epochs.passes(3001) == [(0, 0), (1000, 0), (2000, 0), (2001, 999)]
    np.testing.assert_array_equal(epochs.eval_logits(model, x, rows), whole)
    np.testing.assert_array_equal(epochs.eval_logits(model, x, rows[:1000]), whole[:1000])  # one pass
    assert model.training  # left as it was found


def test_epoch_loss_summed_on_the_device_is_the_host_sum() -> None:
    def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(1000, 5, generator=generator), torch.randint(0, 3, (1000,), generator=generator)
    order = torch.randperm(1000, generator=generator)
    model, optimizer = model_and_optimizer()
    host = 0.0
    for start in range(0, 1000, 64):  # the loop before: a host sync per step
        host += float(
            cross_entropy_step(model, optimizer, x[order[start : start + 64]], y[order[start : start + 64]]).item()
        )
    reference = [p.detach().clone() for p in model.parameters()]
    model, optimizer = model_and_optimizer()
    total, steps = epoch_stepper(cross_entropy_step, model, optimizer, x, y, 64)(order)
    assert steps == 16 and total.dtype == torch.float64
    assert float(total.item()) == host  # bit for bit: float64 adds in step order
    for got, want in zip(model.parameters(), reference, strict=True):
        assert torch.equal(got, want)


def test_plugin_losses_of_shape_one_are_summed() -> None:
    def step(
        model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return cross_entropy_step(model, optimizer, x, y).reshape(1)

    model = torch.nn.Linear(2, 2)
    x, y = torch.randn(10, 2), torch.randint(0, 2, (10,))
    total, steps = epoch_stepper(step, model, torch.optim.SGD(model.parameters(), lr=0.1), x, y, 4)(torch.arange(10))
    assert steps == 3 and torch.isfinite(total)


def test_categorical_codes_do_not_depend_on_how_rows_are_split() -> None:
    from ml8s.data.columns import categorical, present_text

    cells = pa.chunked_array([pa.array(["b", " a", "NA", "c"]), pa.array(["a", "", "b"])])
    column = categorical("k", present_text(cells))
    assert column.category_list() == ["a", "b", "c"]
    assert column.values.tolist() == [1, 0, -1, 2, 0, -1, 1]
    assert column.text().tolist() == ["b", "a", None, "c", "a", None, "b"]
    assert column.counts() == {None: 2, "a": 2, "b": 2, "c": 1}


# Cells Arrow's number parser and the number pattern might judge differently: a column of them must be typed as
# if every cell had gone through the pattern (the fast path may only accept what the pattern accepts).
TRICKY = ["1", "+1", "-1", "1.", ".5", "+.5", "1e5", "1E+5", "1.e5", "5e", ".", "e5", "0x10", "0x1p3", "1_000", "1,5",
          "inf", "-Inf", "INF", "infinity", "+infinity", "NAN", "-nan", "00012", "1.5f", "1d5", "١", "１", "+-1", "--1",
          "1e5.5", ".e1", "+", "-", "Inf1", "infinit", "0.0e-0"]  # fmt: skip


@pytest.mark.parametrize("cell", TRICKY)
def test_a_column_of_one_tricky_cell_is_typed_by_the_number_pattern(cell: str) -> None:
    from ml8s.data.csv_columns import Numbers, chunk_route, number_mask

    cells = pa.array(["7", cell, "8"])
    chunk = chunk_route(cells)[0]
    assert isinstance(chunk, Numbers) == bool(pc.all(number_mask(cells)).as_py())


def _reference_chunk(
    cells: pa.Array,
) -> tuple[str, list[float] | None, list[str] | None, list[int] | None, int, int]:
    """A chunk as the rules define it, the slow way: every cell trimmed, tokens missing, then typed as a whole."""
    from ml8s.data.columns import categorical, floats, present_text
    from ml8s.data.csv_columns import number_mask

    values = present_text(pc.fill_null(cells, ""))
    present = len(values) - values.null_count
    if bool(pc.all(pc.or_(number_mask(values), pc.is_null(values))).as_py()):
        return "numbers", floats(pc.cast(values, pa.float64())).tolist(), None, None, present, present
    column = categorical("", values)
    numbers = int(pc.sum(pc.cast(number_mask(values), pa.int64())).as_py() or 0)
    return "texts", None, column.category_list(), column.values.tolist(), present, numbers


COLUMNS = {
    "plain numbers": ["1", "2.5", None, "-3e2", "4"],
    "numbers with blanks and tokens": [" 1", "2.5 ", "NA", "nan", None, "\t7", "?"],
    "a NaN spelling": ["1", "NAN", "2"],
    "a token spelling NaN": ["1", "NaN", "2"],
    "an infinity": ["1", "inf", "2"],
    "text": ["b", " a", "a ", "NA", None, "b", "\u00a0c\u00a0", "", "a"],
    "text trimming to one value": ["x", " x", "x ", "  x\t"],
    "numbers as text after the sample": [str(i) for i in range(70)] + ["abc"],
    "text with numbers only past the sample": ["a"] * 70 + ["1"],
    "all missing": [None, "NA", "  ", None],
    "booleans": ["true", "False", None, "TRUE"],
    "mostly numbers with stray text": ["1", " 2", "x", "3", "NA", "4e1 ", "y", "5"],
}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_each_route_to_a_chunk_types_cells_as_the_rules_do(name: str) -> None:
    """chunk_route's fast routes (a cast of the cells as read, a cast of their present text, dictionary coding)
    give exactly the chunk the rules define, empty cells given as null (as the loader reads them) or as ""."""
    from ml8s.data.csv_columns import Numbers, chunk_route

    expected = _reference_chunk(pa.array(COLUMNS[name], pa.string()))
    for cells in (pa.array(COLUMNS[name], pa.string()), pc.fill_null(pa.array(COLUMNS[name], pa.string()), "")):
        chunk = chunk_route(cells)[0]
        if isinstance(chunk, Numbers):
            got = ("numbers", chunk.values.tolist(), None, None, chunk.present, chunk.present)
        else:
            column = chunk.column
            got = ("texts", None, column.category_list(), column.values.tolist(), chunk.present, chunk.numbers)
        assert np.array_equal(
            np.array(got[1] or [], dtype=float), np.array(expected[1] or [], dtype=float), equal_nan=True
        )
        assert (got[0], *got[2:]) == (expected[0], *expected[2:])


def test_graphed_loop_bookkeeping_matches_the_plain_loop_on_cpu() -> None:
    """The CUDA-graph loop's static buffers, warm-up count and eager last batch, without capture (no GPU here)."""
    from ml8s.training.loop import Graphed

    def run(graphed: bool) -> tuple[list[float], list[torch.Tensor]]:
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(2)
        x, y = torch.randn(300, 4, generator=generator), torch.randint(0, 2, (300,), generator=generator)
        stepper = (
            Graphed(model, optimizer, x, y, 32, capture=False).run_epoch
            if graphed
            else epoch_stepper(cross_entropy_step, model, optimizer, x, y, 32)
        )
        sums = []
        for _ in range(3):
            total, steps = stepper(torch.randperm(300, generator=generator))
            assert steps == 10  # 9 full batches and one of 12 rows
            sums.append(float(total.item()))
        return sums, [p.detach().clone() for p in model.parameters()]

    (plain_sums, plain), (graphed_sums, graphed) = run(False), run(True)
    assert graphed_sums == plain_sums
    assert all(torch.equal(a, b) for a, b in zip(plain, graphed, strict=True))


def test_prepare_consuming_the_dataset_keeps_the_same_rows(small_data: Path) -> None:
    params = _params(SAMPLE_ROWS="50")
    copied = prepare(load_dataset(fingerprint_local(str(small_data))), params)
    consumed = prepare(load_dataset(fingerprint_local(str(small_data))), params, consume=True)
    assert [c.name for c in consumed.columns] == [c.name for c in copied.columns]
    for a, b in zip(consumed.columns, copied.columns, strict=True):
        np.testing.assert_array_equal(a.values, b.values)
        assert a.category_list() == b.category_list()
    np.testing.assert_array_equal(consumed.target, copied.target)


_DATA_STEPS_ONLY = """
import json, sys
from ml8s.pipeline import features
from ml8s.pipeline.run import run_pipeline

real = features.compute_features
seen = []

def compute_features(spec, out_dir, **options):  # ml8s run up to the end of its features step, then stop
    real(spec, out_dir, **options)
    seen.extend(sorted(m for m in ("mlflow", "onnx", "onnxruntime", "torch") if m in sys.modules))
    raise SystemExit(json.dumps(seen))

features.compute_features = compute_features
run_pipeline({"DATA_ROOT": sys.argv[1], "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": sys.argv[2]})
"""


def test_the_data_steps_load_neither_torch_nor_mlflow(small_data: Path, tmp_path: Path) -> None:
    """Their memory and time must not include those libraries (ml8s run loads them after the features step)."""
    import json
    import subprocess
    import sys

    argv = [sys.executable, "-c", _DATA_STEPS_ONLY, str(small_data), str(tmp_path / "root")]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 1 and json.loads(done.stderr.strip().splitlines()[-1]) == [], done.stderr[-2000:]


@pytest.mark.parametrize("cell", [*TRICKY, "", " 1", "1 ", "NA", "nan", "NaN", "1e999", "-1e999", "1e-999", "?"])
def test_a_numeric_column_typed_by_one_cast_is_typed_as_by_the_pattern(
    cell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """text_column's fast path (one cast when every cell is a plain number) gives the slow way's values, or
    leaves the cell to the slow way, whose error it then is."""
    import ml8s.data.columns as columns
    from ml8s.errors import DataError

    cells = pa.array(["7", cell, None, "8"], type=pa.string())

    def typed() -> tuple[str, list[float] | str]:
        try:
            column = columns.text_column("x", "numeric", cells)
        except DataError as exc:
            return "error", exc.message
        return "values", np.asarray(column.values).view(np.uint64).tolist()

    fast = typed()
    monkeypatch.setattr(columns, "_plain_numbers", lambda cells: None)
    assert fast == typed()


def test_plain_numbers_take_the_one_cast() -> None:
    from ml8s.data.columns import _plain_numbers

    plain = _plain_numbers(pa.array(["1", "", None, "-2.5e3", "+.5"], type=pa.string()))
    assert plain is not None and np.array_equal(plain, [1.0, np.nan, np.nan, -2500.0, 0.5], equal_nan=True)
    for other in (" 1", "NA", "nan", "inf", "1e999", "x"):
        assert _plain_numbers(pa.array(["1", other], type=pa.string())) is None, other


def _per_cell(name: str, kind: str, cells: pa.Array) -> tuple[str, list[float], list[str] | None, int]:
    """The reference: every cell trimmed, tokens missing, checked and typed one by one (text_column's old way)."""
    from ml8s.data.columns import present_text, typed_text

    values = present_text(cells)
    if kind == "boolean":
        valid = pc.fill_null(
            pc.or_kleene(pc.is_null(values), pc.is_in(pc.utf8_lower(values), pa.array(["true", "false"]))), False
        )
        bad = np.flatnonzero(~np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool))
        if len(bad):  # the error's text and row (1 = the first)
            return str(values[int(bad[0])].as_py()), [], None, int(bad[0]) + 1
    column = typed_text(name, kind, values)
    return (
        "",
        np.asarray(column.values, dtype=np.float64).tolist(),
        column.category_list() if kind == "categorical" else None,
        0,
    )


DISTINCT_CASES = [
    ["b", " a", "a ", "NA", None, "b", "\u00a0c\u00a0", "", "a", "?", "null", "B"],
    [" TRUE", "false ", "", None, "True", "NA", "fAlSe"],
    ["true", "yes", "false", "maybe", "yes"],  # the first bad row named
    [None, None],
    [],
    ["x"] * 5,
]


@pytest.mark.parametrize("kind", ["categorical", "boolean"])
@pytest.mark.parametrize("cells", DISTINCT_CASES)
def test_text_typed_once_per_distinct_text_is_typed_as_per_cell(kind: str, cells: list[str | None]) -> None:
    from ml8s.data.columns import text_column
    from ml8s.errors import DataError

    array = pa.array(cells, type=pa.string())
    expected = _per_cell("c", kind, array)
    try:
        column = text_column("c", kind, array)
    except DataError as exc:
        bad, _, _, row = expected
        assert row and f"has {bad!r} in row {row} (of {len(cells)})" in exc.message, exc.message
        return
    _, values, categories, row = expected
    assert not row
    assert np.array_equal(
        np.asarray(column.values, dtype=np.float64), np.asarray(values, dtype=np.float64), equal_nan=True
    )
    assert column.values.dtype == (np.int32 if kind == "categorical" else np.float64)
    if kind == "categorical":
        assert column.category_list() == categories
