"""The recency-weighted sampler: its distribution, determinism, exact resume in another process, gathering."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from records_support import SCHEMA, SIZES, make_rows, run_worker, write_history

from ml8s.errors import RecordsFormatError
from ml8s.records import Batch, RecencySampler, SamplerConfig, gather, generation_probabilities, load_sampler_state

UNEVEN = (1000, 10, 500, 3000)  # row counts chosen so that weighting by rows would be visibly wrong


@pytest.mark.parametrize(
    ("alpha", "expected"),
    [
        (0.0, [1 / 4] * 4),
        (1.0, [1 / 10, 2 / 10, 3 / 10, 4 / 10]),
        (2.0, [1 / 30, 4 / 30, 9 / 30, 16 / 30]),
        (0.5, np.sqrt([1, 2, 3, 4]) / np.sqrt([1, 2, 3, 4]).sum()),
    ],
)
def test_generation_probabilities(alpha: float, expected: list[float]) -> None:
    np.testing.assert_allclose(generation_probabilities(4, alpha), expected, rtol=1e-12)


def test_probabilities_stay_finite_for_long_histories_and_steep_alpha() -> None:
    probabilities = generation_probabilities(100_000, 50.0)
    assert np.isfinite(probabilities).all() and abs(probabilities.sum() - 1) < 1e-9
    assert probabilities[-1] > probabilities[-2] > 0


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0, 0.5])
def test_empirical_frequencies_match(alpha: float) -> None:
    sampler = RecencySampler(UNEVEN, SamplerConfig(alpha=alpha, batch_size=4000, seed=11))
    batches = [sampler.sample() for _ in range(50)]  # 200k draws
    generations = np.concatenate([b.generations for b in batches])
    rows = np.concatenate([b.rows for b in batches])
    frequencies = np.bincount(generations, minlength=4) / generations.size
    np.testing.assert_allclose(frequencies, generation_probabilities(4, alpha), atol=0.01)
    assert (rows >= 0).all() and (rows < np.asarray(UNEVEN)[generations]).all()
    small = np.bincount(rows[generations == 1], minlength=10)  # rows uniform within a generation
    np.testing.assert_allclose(small / small.sum(), np.full(10, 0.1), atol=0.02)


def test_batches_are_sorted_by_generation_then_row() -> None:
    batch = RecencySampler(UNEVEN, SamplerConfig(alpha=1, batch_size=512, seed=5)).sample()
    key = batch.generations * 10_000 + batch.rows
    assert batch.generations.dtype == batch.rows.dtype == np.int64
    assert (np.diff(key) >= 0).all() and batch.generations.size == 512


def test_deterministic_from_the_seed() -> None:
    def draws(seed: int) -> list[Batch]:
        sampler = RecencySampler(UNEVEN, SamplerConfig(alpha=1, batch_size=64, seed=seed))
        return [sampler.sample() for _ in range(3)]

    same, again, other = draws(7), draws(7), draws(8)
    for a, b in zip(same, again, strict=True):
        assert np.array_equal(a.generations, b.generations) and np.array_equal(a.rows, b.rows)
    assert not all(np.array_equal(a.rows, b.rows) for a, b in zip(same, other, strict=True))


def test_resume_in_another_process_continues_identically(tmp_path: Path) -> None:
    config = SamplerConfig(alpha=2, batch_size=257, seed=2024)
    uninterrupted = RecencySampler(UNEVEN, config)
    expected = [uninterrupted.sample() for _ in range(8)]
    interrupted = RecencySampler(UNEVEN, config)
    for _ in range(5):
        interrupted.sample()
    state = interrupted.state()
    assert state.batches_drawn == 5 and state.generation_rows == UNEVEN
    (tmp_path / "state.json").write_text(state.model_dump_json())
    run_worker("resume", str(tmp_path / "state.json"), str(tmp_path / "out.npz"), "3")
    with np.load(tmp_path / "out.npz") as resumed:
        np.testing.assert_array_equal(resumed["generations"], np.stack([b.generations for b in expected[5:]]))
        np.testing.assert_array_equal(resumed["rows"], np.stack([b.rows for b in expected[5:]]))
        assert load_sampler_state(resumed["state"].tobytes()) == uninterrupted.state()


@pytest.mark.parametrize(
    "text",
    [
        b"not json",
        b'{"config": {"alpha": 1, "batch_size": 2, "seed": 1}, "generation_rows": [], "batches_drawn": 0}',
        b'{"config": {"alpha": -1, "batch_size": 2, "seed": 1}, "generation_rows": [3], "batches_drawn": 0,'
        b' "bit_generator": {"state": 1, "inc": 1, "has_uint32": 0, "uinteger": 0}}',
        b'{"config": {"alpha": 1, "batch_size": 2, "seed": 1}, "generation_rows": [0], "batches_drawn": 0,'
        b' "bit_generator": {"state": 1, "inc": 1, "has_uint32": 0, "uinteger": 0}}',
        b'{"config": {"alpha": 1, "batch_size": 2, "seed": 1}, "generation_rows": [3], "batches_drawn": 0,'
        b' "bit_generator": {"state": -1, "inc": 1, "has_uint32": 0, "uinteger": 0}}',
    ],
)
def test_bad_state_is_a_named_error(text: bytes) -> None:
    with pytest.raises(RecordsFormatError, match="sampler state: not a valid SamplerState"):
        load_sampler_state(text)


def test_bad_generation_rows_refused() -> None:
    for rows in ((), (3, 0), (3, -2)):
        with pytest.raises(RecordsFormatError, match="each ≥ 1 row"):
            RecencySampler(rows, SamplerConfig(batch_size=1, seed=0))


def test_gather_reads_the_drawn_rows(tmp_path: Path) -> None:
    mapped = write_history(str(tmp_path)).open_mapped(str(tmp_path / "cache"))
    batch = mapped.sampler(SamplerConfig(alpha=1, batch_size=100, seed=9)).sample()
    features, targets = mapped.gather(batch)
    truth = [make_rows(g, n) for g, n in enumerate(SIZES)]
    expected = np.stack([truth[g][r] for g, r in zip(batch.generations, batch.rows, strict=True)])
    assert features.dtype == np.float32 and features.shape == (100, 3) and targets.dtype == np.int64
    np.testing.assert_array_equal(features, expected[:, :3])
    np.testing.assert_array_equal(targets, expected[:, 3].astype(np.int64))
    shuffled = Batch(generations=np.array([2, 0, 2, 1]), rows=np.array([3, 39, 0, 6]))  # not sorted: kept in order
    features, targets = gather(mapped.maps, shuffled)
    np.testing.assert_array_equal(features, np.stack([truth[2][3], truth[0][39], truth[2][0], truth[1][6]])[:, :3])
    np.testing.assert_array_equal(gather(truth, shuffled)[0], features)  # in-RAM arrays gather the same


@pytest.mark.parametrize(
    ("generations", "rows"),
    [([0, 3], [0, 0]), ([1], [7]), ([0], [-1]), ([0, 1], [0])],
)
def test_gather_refuses_rows_that_do_not_exist(generations: list[int], rows: list[int]) -> None:
    maps = [make_rows(g, n) for g, n in enumerate(SIZES)]
    with pytest.raises(RecordsFormatError, match="expected"):
        gather(maps, Batch(generations=np.array(generations), rows=np.array(rows)))


def test_gather_refuses_maps_of_another_shape() -> None:
    maps = [make_rows(0, 5), np.zeros((5, 7), dtype=np.float32)]
    with pytest.raises(RecordsFormatError, match=r"map 1 has shape \(5, 7\); expected \(rows, 4\)"):
        gather(maps, Batch(generations=np.array([0, 1]), rows=np.array([1, 2])))


def test_resume_against_a_grown_history_but_not_another_one(tmp_path: Path) -> None:
    history = write_history(str(tmp_path))
    config = SamplerConfig(alpha=1, batch_size=32, seed=4)
    sampler = history.open_mapped(str(tmp_path)).sampler(config)
    sampler.sample()
    state = sampler.state()
    expected = sampler.sample()
    history.append_generation(SCHEMA, make_rows(3, 9))
    grown = history.open_mapped(str(tmp_path))
    resumed = grown.resume_sampler(state).sample()  # still over the generations it started with
    assert np.array_equal(resumed.rows, expected.rows) and np.array_equal(resumed.generations, expected.generations)
    other = write_history(str(tmp_path / "other"), sizes=(40, 8)).open_mapped(str(tmp_path))
    with pytest.raises(RecordsFormatError, match="not the history the sampler was drawing from"):
        other.resume_sampler(state)


def test_numpy_row_counts_accepted() -> None:
    counts = np.array([3, 4], dtype=np.int64)
    assert RecencySampler(list(counts), SamplerConfig(batch_size=2, seed=0)).generation_rows == (3, 4)
