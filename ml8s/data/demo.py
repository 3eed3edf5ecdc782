"""A deterministic churn-like demo dataset, so `make run` works from a fresh clone with no download.

The dataset exercises everything the pipeline must handle (numeric, categorical and boolean columns,
missing values, a few rows with a missing target) and has a target that really depends on the
features, so a trained classifier visibly beats the majority class.

Why determinism matters here: the data fingerprint is part of RUN_ID (SPEC §2). If two invocations of
the generator produced different bytes, two `make run`s on two machines (or after `make clean`) would
get two RUN_IDs and the idempotence demo would be meaningless. So:

- every random draw comes from one ``numpy.random.default_rng(seed)`` stream, drawn in a fixed order
  and always for every row (a missing value masks a draw, it never skips one);
- the target is ``z + logistic noise > 0`` with ``z`` built from ``+`` and ``*`` only, so no vectorized
  transcendental function (whose last bit may differ between SIMD code paths) decides a label;
- numbers are written with fixed formats (``f"{x:.2f}"``, ``str(int)``), never ``repr``, and files are
  encoded as UTF-8 with ``\\n`` line ends.

Bytes are stable for a given numpy version; numpy does not promise identical streams across versions
of its distributions, which is why constraints.txt pins it.

Writing is idempotent and never mixes datasets (``ml8s.data.demo_files``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ml8s.data.demo_files import DemoFile, write_dataset
from ml8s.errors import DataError

COLUMNS: tuple[str, ...] = (
    "tenure_months",
    "monthly_charges",
    "total_charges",
    "support_calls",
    "data_usage_gb",
    "num_devices",
    "satisfaction_score",
    "plan",
    "region",
    "payment_method",
    "contract",
    "auto_pay",
    "paperless_billing",
    "has_partner",
    "churned",
)
TARGET = "churned"

PLANS = ("basic", "standard", "premium")
REGIONS = ("central", "east", "north", "south", "west")
PAYMENT_METHODS = ("bank_transfer", "credit_card", "electronic_check", "mailed_check")
CONTRACTS = ("month-to-month", "one_year", "two_year")

# Fraction of empty fields per column (missing at random: the target is computed from the true values).
MISSING_RATES: tuple[tuple[str, float], ...] = (
    ("total_charges", 0.02),
    ("support_calls", 0.015),
    ("data_usage_gb", 0.01),
    ("satisfaction_score", 0.04),
    ("region", 0.03),
    ("payment_method", 0.02),
    ("paperless_billing", 0.015),
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def generate(rows: int, files: int, seed: int) -> list[DemoFile]:
    """The dataset as ``files`` CSV files of ``rows`` rows in total (pure: same arguments, same bytes).

    Rows are split as evenly as possible, the first files taking one extra row when it does not divide.
    Every value is drawn up front as compact arrays; a file's text is made only when its ``content`` is read,
    a chunk of rows at a time, so 20 million rows never exist as Python strings at once.
    """
    if rows < 1:
        raise DataError(f"--rows={rows}: expected at least 1 row")
    if files < 1 or files > rows:
        raise DataError(f"--files={files}: expected between 1 and --rows ({rows}) files")
    if seed < 0:
        raise DataError(f"--seed={seed}: expected an integer >= 0")
    drawn = _draw(rows, np.random.default_rng(seed))
    out: list[DemoFile] = []
    start = 0
    base, extra = divmod(rows, files)
    for index in range(files):
        count = base + (1 if index < extra else 0)
        out.append(DemoFile(name=f"part-{index:05d}.csv", rows=count, make=_text(drawn, start, start + count)))
        start += count
    return out


def generate_generations(last: int, rows: int, seed: int) -> list[DemoFile]:
    """Generations 0..``last`` of a drifting stream, one file each (``gen-000.csv`` …), ``rows`` rows apiece:
    generation g draws from ``seed + g`` and shifts churn toward short-tenure, high-charge customers by g
    steps (continuous training's demo: docs/continuous.md). Pure, like :func:`generate`."""
    if last < 0 or last > 999:
        raise DataError(f"--generations={last}: expected 0 to 999")
    if rows < 10:
        raise DataError(f"--rows={rows}: expected at least 10 rows per generation")
    return [
        DemoFile(
            name=f"gen-{g:03d}.csv",
            rows=rows,
            make=_text(_draw(rows, np.random.default_rng(seed + g), drift=float(g)), 0, rows),
        )
        for g in range(last + 1)
    ]


_CHUNK = 200_000  # rows formatted at a time


def _text(drawn: dict[str, npt.NDArray[np.generic]], start: int, stop: int) -> Callable[[], bytes]:
    """The CSV bytes of rows ``start`` to ``stop`` (header first), made on demand."""

    def make() -> bytes:
        parts = [(",".join(COLUMNS) + "\n").encode("utf-8")]
        for a in range(start, stop, _CHUNK):
            fields = _fields(drawn, a, min(a + _CHUNK, stop))
            lines = [",".join(row) for row in zip(*(fields[name] for name in COLUMNS), strict=True)]
            parts.append("".join(line + "\n" for line in lines).encode("utf-8"))
        return b"".join(parts)

    return make


def _draw(n: int, rng: np.random.Generator, drift: float = 0.0) -> dict[str, npt.NDArray[np.generic]]:
    """Every column's values and blank masks as arrays. The order of the draws below is part of the format;
    ``drift`` (0 for the plain dataset, whose bytes it leaves alone) moves the churn boundary."""
    contract = rng.choice(len(CONTRACTS), size=n, p=[0.55, 0.25, 0.20])
    plan = rng.choice(len(PLANS), size=n, p=[0.45, 0.35, 0.20])
    region = rng.integers(0, len(REGIONS), size=n)
    payment = rng.choice(len(PAYMENT_METHODS), size=n, p=[0.22, 0.25, 0.33, 0.20])
    num_devices: IntArray = rng.integers(1, 7, size=n)

    contract_bonus = np.array([0.0, 12.0, 24.0])[contract]
    tenure: IntArray = np.floor(np.clip(rng.gamma(2.0, 11.0, size=n) + contract_bonus, 0.0, 72.0)).astype(np.int64)
    plan_base = np.array([25.0, 55.0, 85.0])[plan]
    monthly: FloatArray = np.clip(plan_base + 2.0 * num_devices + rng.normal(0.0, 8.0, size=n), 18.25, 119.75)
    total: FloatArray = tenure * monthly * rng.uniform(0.95, 1.05, size=n)
    support: IntArray = rng.poisson(1.0 + 0.8 * (plan == 0), size=n).astype(np.int64)
    usage: FloatArray = rng.gamma(2.0, 10.0 + 10.0 * plan, size=n)
    satisfaction: IntArray = np.clip(np.rint(4.2 - 0.45 * support + rng.normal(0.0, 0.9, size=n)), 1, 5).astype(
        np.int64
    )
    card_or_bank = payment <= 1
    auto_pay: BoolArray = rng.random(size=n) < np.where(card_or_bank, 0.8, 0.25)
    paperless: BoolArray = rng.random(size=n) < 0.6
    partner: BoolArray = rng.random(size=n) < 0.48

    # A logistic model of a few features (only + and *), plus standard logistic noise.
    z = (
        -1.2
        + 2.0 * (contract == 0)
        - 1.2 * (contract == 2)
        - 0.06 * tenure
        + 0.04 * (monthly - 60.0)
        + 0.5 * support
        - 0.7 * (satisfaction - 3)
        - 0.8 * auto_pay
        + 0.7 * (payment == 2)
        + 0.3 * paperless
        - 0.3 * partner
    )
    if drift:
        z = z + drift * (0.35 * (tenure < 12) + 0.02 * (monthly - 60.0) - 0.25)
    churned: BoolArray = z + rng.logistic(0.0, 1.0, size=n) > 0.0
    drawn: dict[str, npt.NDArray[np.generic]] = {
        "tenure_months": tenure,
        "monthly_charges": monthly,
        "total_charges": total,
        "support_calls": support,
        "data_usage_gb": usage,
        "num_devices": num_devices,
        "satisfaction_score": satisfaction,
        "plan": plan,
        "region": region,
        "payment_method": payment,
        "contract": contract,
        "auto_pay": auto_pay,
        "paperless_billing": paperless,
        "has_partner": partner,
        TARGET: churned,
    }
    for name, rate in MISSING_RATES:
        drawn[_BLANK + name] = rng.random(size=n) < rate
    # A couple of rows without a label (the pipeline must drop and count them), never all of them.
    missing_targets = min(max(2, n // 1000), n // 10)
    blank_target = np.zeros(n, dtype=bool)
    if missing_targets:
        blank_target[rng.choice(n, size=missing_targets, replace=False)] = True
    drawn[_BLANK + TARGET] = blank_target
    return drawn


_BLANK = "blank:"
_TEXT: dict[str, Callable[[object], str]] = {
    "tenure_months": str,
    "monthly_charges": lambda v: f"{v:.2f}",
    "total_charges": lambda v: f"{v:.2f}",
    "support_calls": str,
    "data_usage_gb": lambda v: f"{v:.1f}",
    "num_devices": str,
    "satisfaction_score": str,
}
_LABELS: dict[str, tuple[str, ...]] = {
    "plan": PLANS,
    "region": REGIONS,
    "payment_method": PAYMENT_METHODS,
    "contract": CONTRACTS,
}


def _fields(drawn: dict[str, npt.NDArray[np.generic]], start: int, stop: int) -> dict[str, list[str]]:
    """Rows ``start`` to ``stop`` of every column as CSV fields (numbers in fixed formats, blanks applied)."""
    fields: dict[str, list[str]] = {}
    for name in COLUMNS:
        values = drawn[name][start:stop].tolist()
        if name in _TEXT:
            fields[name] = [_TEXT[name](v) for v in values]
        elif name in _LABELS:
            fields[name] = [_LABELS[name][i] for i in values]
        elif name == TARGET:
            fields[name] = ["yes" if v else "no" for v in values]
        else:
            fields[name] = [_bool(v) for v in values]
        blank = drawn.get(_BLANK + name)
        if blank is not None:
            _blank(fields[name], blank[start:stop].tolist())
    return fields


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _blank(column: list[str], mask: list[bool]) -> None:
    for i, missing in enumerate(mask):
        if missing:
            column[i] = ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ml8s.data.demo",
        description="Write the deterministic churn-like demo dataset (CSV parts) into a directory.",
    )
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--rows", type=int, default=50000, help="rows in total (default: 50000)")
    parser.add_argument("--files", type=int, default=5, help="number of CSV files (default: 5)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")
    parser.add_argument(
        "--generations",
        type=int,
        default=None,
        metavar="K",
        help="instead: a drifting stream's generations 0..K, one file gen-NNN.csv each of --rows rows",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Generate and write the dataset; 0 on success (including "already there"), 1 on a refused directory."""
    args = _parser().parse_args(argv)
    out: str = args.out
    try:
        demo_files = (
            generate(args.rows, args.files, args.seed)
            if args.generations is None
            else generate_generations(args.generations, args.rows, args.seed)
        )
        written = write_dataset(out, demo_files)
    except MemoryError:  # every value is drawn up front: --rows 10**11 asked numpy for 745 GiB
        print(
            f"demo_data: DATA_ERROR: --rows={args.rows}: not enough memory to draw them; expected fewer rows",
            file=sys.stderr,
        )
        return 1
    except DataError as exc:
        print(f"demo_data: {exc}", file=sys.stderr)
        return 1
    rows = sum(f.rows for f in demo_files)
    size = sum(os.path.getsize(os.path.join(out, f.name)) for f in demo_files)
    summary = f"{rows} rows, {len(demo_files)} files, {size:,} bytes, seed {args.seed}"
    if not written:
        print(f"demo_data: {out} already holds this dataset ({summary}); nothing written", file=sys.stderr)
    else:
        print(f"demo_data: wrote {len(written)} of {len(demo_files)} files to {out} ({summary})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
