"""The split drawn while the columns are typed (features.prepared.SplitAhead, the ``lead`` of load_dataset).

``ml8s run`` types the target column first and draws the TEST_SIZE split from it on a thread of its own while the
other columns are typed. What it prepares must be what preparing the typed dataset afterwards gives: the same
rows, classes, split and columns, with missing targets, SAMPLE_ROWS, both, and Parquet files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ml8s.data.dataset import Column, load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError
from ml8s.features import prepared
from ml8s.features.prepared import Prepared, SplitAhead, SplitArray, prepare
from ml8s.identity.params import RunParams, validate_params
from ml8s.identity.variables import canonical_config


def _params(**values: str) -> RunParams:
    raw: dict[str, str | None] = {"DATA_ROOT": "/unused", "TARGET_COLUMN": "y"}
    raw.update({name.upper(): value for name, value in values.items()})
    return validate_params(canonical_config(raw))


def _write(directory: Path, rows: int, missing_every: int, parquet: bool) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(rows)
    ys = np.where(rng.random(rows) < 0.4, "yes", "no").astype(object)
    if missing_every:
        ys[::missing_every] = ""
    columns = {
        "a": rng.standard_normal(rows).round(3),
        "b": np.where(rng.random(rows) < 0.5, "red", "blue"),
        "y": ys,
    }
    if parquet:
        table = pa.table({"a": columns["a"], "b": columns["b"], "y": [v or None for v in ys]})
        pq.write_table(table, directory / "part.parquet")
    else:
        lines = [f"{a},{b},{y}" for a, b, y in zip(columns["a"], columns["b"], ys, strict=True)]
        (directory / "part.csv").write_text("a,b,y\n" + "\n".join(lines) + "\n")
    return directory


def _same(left: Prepared, right: Prepared) -> None:
    assert left.row_counts() == right.row_counts()
    assert left.classes == right.classes
    assert left.target.tobytes() == right.target.tobytes()
    assert left.split.tobytes() == right.split.tobytes()
    assert [c.name for c in left.columns] == [c.name for c in right.columns]
    for mine, theirs in zip(left.columns, right.columns, strict=True):
        assert mine.values.tobytes() == theirs.values.tobytes()


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row counts splits are drawn for, in order."""
    counts: list[int] = []
    real = prepared._split

    def counted(n: int, test_size: float, seed: int) -> SplitArray:
        counts.append(n)
        return real(n, test_size, seed)

    monkeypatch.setattr(prepared, "_split", counted)
    return counts


@pytest.mark.parametrize("parquet", [False, True])
@pytest.mark.parametrize(
    ("missing_every", "settings"),
    [(0, {}), (7, {}), (0, {"SAMPLE_ROWS": "300"}), (5, {"SAMPLE_ROWS": "250", "TEST_SIZE": "0.37"})],
)
def test_the_split_drawn_ahead_prepares_what_preparing_afterwards_does(
    tmp_path: Path, parquet: bool, missing_every: int, settings: dict[str, str], draws: list[int]
) -> None:
    data = _write(tmp_path / "data", 1000, missing_every, parquet)
    params = _params(**settings)
    fingerprint = fingerprint_local(str(data))
    plain = prepare(load_dataset(fingerprint), params)
    draws.clear()
    with SplitAhead(params) as ahead:
        early = prepare(load_dataset(fingerprint, lead=ahead), params, consume=True, ahead=ahead)
    assert draws == [len(early.target)]  # drawn once, ahead, and used
    _same(early, plain)


def test_a_split_drawn_for_another_count_is_not_used(tmp_path: Path, draws: list[int]) -> None:
    """Were the count taken from the target ever not the rows kept, preparing draws the split of its own count."""
    data = _write(tmp_path / "data", 400, 9, parquet=False)
    params = _params()
    fingerprint = fingerprint_local(str(data))
    plain = prepare(load_dataset(fingerprint), params)
    with SplitAhead(params) as ahead:
        dataset = load_dataset(fingerprint)
        wrong = dataset.column("y").part(0, 100)  # a target of another length: another count
        ahead.take(wrong)
        # waited for: drawn on the split's thread, it was sometimes counted after the clear below (a loaded machine)
        ahead.draw(int(np.count_nonzero(~wrong.missing())), params.test_size, params.random_seed).result()
        draws.clear()
        _same(prepare(dataset, params, consume=True, ahead=ahead), plain)
    assert draws == [len(plain.target)]


def test_the_lead_gets_the_picked_column_once_typed_and_the_dataset_is_the_same(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", 500, 0, parquet=False)
    fingerprint = fingerprint_local(str(data))

    class Recording:
        def __init__(self, wanted: str | None) -> None:
            self.wanted, self.seen, self.names = wanted, [], ()

        def pick(self, names: tuple[str, ...]) -> str | None:
            self.names = names
            return self.wanted

        def take(self, column: Column) -> None:
            self.seen.append(column)

    plain = load_dataset(fingerprint)
    picking, picking_none = Recording("b"), Recording(None)
    for lead in (picking, picking_none):
        dataset = load_dataset(fingerprint, lead=lead)
        assert lead.names == ("a", "b", "y")
        assert [c.values.tobytes() for c in dataset.columns] == [c.values.tobytes() for c in plain.columns]
    assert [c.name for c in picking.seen] == ["b"]
    assert picking.seen[0].values.tobytes() == plain.column("b").values.tobytes()
    assert picking_none.seen == []


def test_a_target_the_columns_lack_draws_nothing_and_preparing_says_so(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", 50, 0, parquet=False)
    params = _params(TARGET_COLUMN="nope")
    with SplitAhead(params) as ahead, pytest.raises(DataError, match="nope"):
        prepare(load_dataset(fingerprint_local(str(data)), lead=ahead), params, consume=True, ahead=ahead)
