"""CLI subcommand ``ml8s predict``: a run's model applied to raw rows from a CSV or Parquet file."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, BinaryIO

from ml8s.cli.args import add_require_signed, add_root, command_root, guarded, print_warning, run_id_arg
from ml8s.cli.streams import write_binary
from ml8s.errors import InferenceError, PredictionInputError, VersionNotFoundError
from ml8s.output_files import write_output
from ml8s.text import is_digits

# Here, not from ml8s.inference.output: parsing the command line imports no pyarrow.
FORMATS = ("csv", "json", "parquet")
DEFAULT_PRECISION = 6
_CHUNK = 1 << 20  # bytes of --input read at a time
PARQUET_SUFFIXES = (".parquet", ".pq")  # as training names its Parquet files (ml8s.data.dataset)

if TYPE_CHECKING:
    import pyarrow as pa

    from ml8s.chain import Anchor, ChainStore, ChainVersion, Follower
    from ml8s.cli.args import Subcommands
    from ml8s.inference import ModelFiles
    from ml8s.inference.csv_rows import CsvColumns
    from ml8s.inference.output import OutputFormat


def register(commands: Subcommands) -> None:
    """Add ``ml8s predict`` to the ``ml8s`` parser."""
    predict = commands.add_parser(
        "predict",
        help="predict on raw rows (CSV or Parquet) with a complete run's model, or a chain version's",
        description="Reads raw rows (a CSV file with a header, or a .parquet file, as the training data), applies "
        "the model's own feature rules and exported model, and writes CSV (or JSON, Parquet): the --id-column if "
        "given, predicted_class, then probability_{class} for each class in class order, rounded to --precision "
        "decimals. The model is a complete run's (--run) or a chain version's (--chain, read from "
        "the version's payload alone, each file checked against its block).",
    )
    source = predict.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=run_id_arg, metavar="RUN_ID", help="the run whose model predicts")
    source.add_argument("--chain", metavar="NAME", help="the model chain whose version predicts")
    predict.add_argument(
        "--version",
        type=_counter,
        metavar="N",
        help="with --chain: the version's counter (default: what followers serve)",
    )
    predict.add_argument("--anchor", default=None, help="with --chain: an anchor file the head must extend")
    add_require_signed(predict)
    predict.add_argument(
        "--input",
        required=True,
        metavar="FILE",
        help="raw rows: CSV with a header, or Parquet when named .parquet or .pq ('-': CSV from stdin)",
    )
    predict.add_argument("--output", default="-", metavar="FILE", help="where the predictions go (default: stdout)")
    predict.add_argument(
        "--format",
        choices=FORMATS,
        help="csv, json (a list) or parquet (default: by --output's extension, .json or .parquet, else csv)",
    )
    predict.add_argument("--id-column", metavar="NAME", help="an input column copied first into each prediction")
    predict.add_argument(
        "--precision",
        type=_precision,
        default=DEFAULT_PRECISION,
        metavar="N",
        help=f"decimals of each probability (default {DEFAULT_PRECISION}; 'full': every digit, exact read-back)",
    )
    predict.add_argument(
        "--strict",
        action="store_true",
        help="refuse rows holding a category the model never saw, or text in a numeric column (default: warn)",
    )
    add_root(predict)
    predict.set_defaults(handler=guarded(_predict))


def _precision(text: str) -> int | None:
    if text == "full":
        return None
    if not is_digits(text) or int(text) > 17:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of decimals from 0 to 17, or 'full'")
    return int(text)


def _format(args: argparse.Namespace) -> OutputFormat:
    """--format, else the one --output's extension names: ``--output preds.json`` wrote CSV into a .json file."""
    named = str(args.format) if args.format is not None else ""
    if not named and args.output != "-":
        named = os.path.splitext(str(args.output))[1].lower().lstrip(".")
    return "json" if named == "json" else "parquet" if named == "parquet" else "csv"


def _counter(text: str) -> int:
    if not is_digits(text) or len(text) > 18:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a version counter (a whole number, 0 or more)")
    return int(text)


def _predict(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from ml8s.inference import Predictor, read_run_files
    from ml8s.inference.cells import parquet_table
    from ml8s.inference.csv_rows import read_csv_columns
    from ml8s.inference.output import render, stray_numbers, unseen_categories

    if args.chain is None and (args.version is not None or args.anchor is not None):
        raise PredictionInputError("--version and --anchor name a chain's; expected them together with --chain NAME")

    if args.input != "-" and args.output != "-" and _same_file(str(args.input), str(args.output)):
        raise PredictionInputError(
            f"--output {args.output} is the --input file; expected another path (the rows would be replaced by "
            "their predictions)"
        )
    where = "standard input" if args.input == "-" else str(args.input)
    parquet = args.input != "-" and str(args.input).lower().endswith(PARQUET_SUFFIXES)
    try:
        data = _read(sys.stdin.buffer, where) if args.input == "-" else _read_file(args.input, where, text=not parquet)
    except OSError as exc:
        raise PredictionInputError(f"cannot read --input {where}: {exc.strerror or exc}") from exc
    source = parquet_table(data, where) if parquet else read_csv_columns(data, where)  # CSV: text columns already
    del data
    columns = tuple(source.column_names) if isinstance(source, pa.Table) else source.columns
    if args.id_column is not None and args.id_column not in columns:
        raise PredictionInputError(
            f"--id-column {args.id_column!r} is not a column of {where}; expected one of its header"
        )
    files = read_run_files(command_root(args).uri, args.run) if args.run is not None else _chain_files(args)
    predictor = Predictor(files)
    _check_id_column(args.id_column, predictor.classes)
    absent = sorted({column.name for column in predictor.transform.inputs} - set(columns))
    if absent:  # a file without rows too: its header is what the next file with rows will have
        raise PredictionInputError(
            f"{where} has no column(s) {absent} in its header {list(columns)}; expected every column the "
            f"model's features use{_spacing_hint(absent, columns)}"
        )
    table, failed = _cells(source, {column.name for column in predictor.transform.inputs}, args.id_column)
    typed = predictor.transform.typed_cells(table.cells, failed)  # a cell no value of its kind can be is refused
    unseen = unseen_categories(predictor.transform, typed)
    if unseen and args.strict:
        raise PredictionInputError(f"--strict: {unseen[0].message()} (and {len(unseen) - 1} more column(s))")
    for found in unseen:
        print_warning(found.message())
    stray = stray_numbers(predictor.transform, table.cells, typed)
    if stray and args.strict:
        raise PredictionInputError(
            f"--strict: column {stray[0].column!r} holds {stray[0].cells} cell(s) of text that is not a number "
            f"(e.g. {list(stray[0].examples)}); expected numbers or an empty cell (without --strict such text is "
            "read as missing, as training reads a numeric column's stray text)"
        )
    for warning in stray:
        print_warning(warning.message)
    if args.id_column is not None and args.id_column in failed:
        raise failed[args.id_column]
    ids = table.cells[args.id_column].to_pylist() if args.id_column is not None else []
    predictions = predictor.predict_typed(typed, table.rows)
    out = render(predictions, _format(args), precision=args.precision, id_column=args.id_column, ids=ids)
    if args.output == "-":
        write_binary(out)
    else:
        _write_atomically(str(args.output), out)
    return 0


def _chain_files(args: argparse.Namespace) -> ModelFiles:
    """The version's files, read as every follower reads: through one poll of the checked path (signatures,
    the pinned root, CHAIN_REQUIRE_SIGNED, --anchor, the run index and trail), then the version it checked."""
    from ml8s.chain import ChainStore, Follower, ReadTrust
    from ml8s.cli.follow import anchor_file
    from ml8s.identity.settings import PlatformSettings
    from ml8s.inference import read_chain_files

    root = command_root(args)
    settings = PlatformSettings.load(os.environ, {"pipeline_root_uri": root.uri, "chain_name": args.chain})
    chain = ChainStore(root.open(), settings.chain_name)
    trust = ReadTrust.from_settings(settings, args.require_signed)
    for note in trust.notes(chain):
        print(f"ml8s: chain {chain.name!r}: {note}", file=sys.stderr)
    anchor = anchor_file(args.anchor)
    follower = Follower(chain, anchor=anchor, trust=trust)
    follower.poll()
    promoted = _promoted(chain, anchor, follower, required=args.version is None)  # with --version too: the pins hold
    if args.version is not None:
        version: ChainVersion | None = follower.fresh_version(args.version)
    elif promoted is not None:
        # checked like the head: the promoted block, reached from it by hash links (from a head read again when
        # it was committed and promoted after the poll)
        version = follower.fresh_version(promoted.counter, promoted.block_hash)
    else:
        version = follower.current
    if version is None:  # poll() always sets it; a guard for the type checker
        raise PredictionInputError(f"chain {chain.name!r}: no head was read")
    return read_chain_files(chain, version)


def _promoted(chain: ChainStore, anchor: Anchor | None, follower: Follower, *, required: bool) -> ChainVersion | None:
    """What followers serve under a promotion gate: the promoted version; None without a gate (the head), or
    when not ``required`` (--version) and nothing is promoted yet. A log shorter than, or forked from, what
    ``anchor`` pins is refused either way (``promotion_rollback``/``_fork``)."""
    from ml8s.chain import PromotionReader

    reader = PromotionReader(chain, root=follower.reader.trust.root, policies=follower.checked_policies)
    if not reader.gated(anchor.checkpoint.promotion if anchor is not None else None):
        return None
    served = reader.served()
    if served is None and required:
        raise VersionNotFoundError(
            f"chain {chain.name!r} has a promotion gate and no version promoted yet; expected one promoted "
            "(ml8s chain promote N), or --version N"
        )
    return served


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one does not exist (yet): not the same file
        return False


def _cells(
    source: CsvColumns | pa.Table, names: set[str], id_column: str | None
) -> tuple[CsvColumns, dict[str, PredictionInputError]]:
    """The text cells of the columns the model reads (and the id column), and the error of each Parquet column
    whose cells cannot be read, raised when that column is typed (:func:`ml8s.inference.cells.read_cells`)."""
    from ml8s.inference.cells import read_cells
    from ml8s.inference.csv_rows import CsvColumns

    if isinstance(source, CsvColumns):
        return source, {}
    read = read_cells([source], sorted(names | ({id_column} if id_column is not None else set())))
    return CsvColumns(columns=tuple(source.column_names), cells=read.cells, rows=read.rows), read.failed


def _read_file(path: str, where: str, *, text: bool = True) -> bytes:
    with open(path, "rb") as handle:
        return _read(handle, where, text=text)


def _read(stream: BinaryIO, where: str, *, text: bool = True) -> bytes:
    """The whole input; CSV (``text``) refused early when its first HEADER_MAX bytes hold no line end: a header
    that long is no CSV header (``/dev/zero``, a binary file), and reading on would only fill the memory."""
    from ml8s.data.csv_text import HEADER_MAX  # pyarrow: only for the command that reads CSV

    chunks: list[bytes] = []
    size, lines = 0, False
    while chunk := stream.read(_CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        lines = lines or b"\n" in chunk or b"\r" in chunk
        if text and not lines and size > HEADER_MAX:
            raise PredictionInputError(
                f"{where} has no line end in its first {HEADER_MAX} bytes; expected CSV text: a header line of "
                "column names, then rows"
            )
    return b"".join(chunks)


def _write_atomically(path: str, data: bytes) -> None:
    """A regular file is replaced whole or kept; a device or FIFO (``/dev/stdout``) is written in place."""

    def fail(reason: str) -> InferenceError:
        return InferenceError(f"cannot write --output {path}: {reason}")

    write_output(path, data, fail)


def _check_id_column(id_column: str | None, classes: tuple[str, ...]) -> None:
    """An id named like a prediction column would be overwritten by it (JSON, Parquet) or repeat its header (CSV)."""
    from ml8s.inference.predictor import PREDICTED, PROBABILITY_PREFIX

    outputs = [PREDICTED, *(f"{PROBABILITY_PREFIX}{c}" for c in classes)]
    if id_column in outputs:
        raise PredictionInputError(
            f"--id-column {id_column!r} is also the name of a prediction column; expected a column named other "
            f"than {outputs} (rename it in the input)"
        )


def _spacing_hint(absent: list[str], columns: tuple[str, ...]) -> str:
    """A hint when a missing column is in the header with other surrounding spaces: names are matched exactly,
    as the training data spelled them."""
    near = sorted(c for c in columns if c.strip() in {a.strip() for a in absent})
    if not near:
        return ""
    return f" (names are matched exactly, spaces included: the header has {near})"
