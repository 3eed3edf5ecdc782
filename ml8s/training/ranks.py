"""One rank of a distributed training (TRAIN_WORLD_SIZE > 1): what every training process runs.

``ml8s run`` starts the ranks as ``python -m ml8s.training.ranks REQUEST`` (:mod:`ml8s.training.launch`);
the Flyte PyTorch task starts them through torch elastic and calls :func:`train_rank` in each. Either way
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are in the environment.

Each rank trains its slice of every batch (:mod:`ml8s.training.ddp`), then writes its own shard of the
trained weights, ``model_shard_{rank}.shard`` (:mod:`ml8s.shards`: streamed, atomic), into rank 0's output
directory. The ranks exchange their shard receipts; rank 0 writes the shards' metadata last of the
checkpoint, then, as one process would, ``model_native.safetensors``, the training state, the metrics and
the TensorBoard events, and sends its train summary to every rank: each returns it. The checkpoint id
in every shard header is the sha256 of ``model_native.safetensors``: shards and weights name each other.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict

from ml8s import log
from ml8s.context.run import RunSpec
from ml8s.contract import layout
from ml8s.errors import LineageError, Ml8sError, RankError
from ml8s.interrupts import die_with_parent
from ml8s.modeling.determinism import seed_everything
from ml8s.modeling.registry import brings_own_step
from ml8s.process_exit import end_process
from ml8s.shards import ShardReceipt, WriterConfig, pieces_for_rank, write_metadata, write_shard
from ml8s.store import open_store
from ml8s.training.ddp import RankEnv, close_group, ddp_fit, open_group
from ml8s.training.fit import cold_state, model_family, native_bytes, read_training_data, write_trained
from ml8s.training.optim import adam
from ml8s.training.state import began_rng
from ml8s.training.summary import TrainSummary

SHARD_PREFIX = layout.MODEL_SHARD_PREFIX.rsplit("/", 1)[-1]
"""The shards' prefix inside a training output directory (``model``: ``model_shard_0.shard`` ...)."""


class RankResult(BaseModel):
    """What every rank returns: rank 0's train summary and the directory holding the trained files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary: TrainSummary
    out_dir: str


class RankRequest(BaseModel):
    """What ``python -m ml8s.training.ranks`` reads from its one argument, a JSON file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: RunSpec
    features_dir: str
    out_dir: str
    summary_path: str  # rank 0 writes the TrainSummary JSON here
    error_dir: str  # a failing rank writes ``rank_{rank}.error`` here: its error code and message


def train_rank(spec: RunSpec, features_dir: str, out_dir: str, world: RankEnv | None = None) -> RankResult:
    """Train this process's rank; every rank returns rank 0's summary and output directory (every rank's
    shard goes there, so the ranks must share a file system, i.e. run on one node)."""
    world = world or RankEnv.from_env(os.environ)
    params = spec.params
    if world.world_size != params.train_world_size:
        raise RankError(
            f"rank {world.rank} was started in a world of {world.world_size} ranks; the run has "
            f"TRAIN_WORLD_SIZE={params.train_world_size}"
        )
    if spec.lineage is not None:
        raise LineageError("a warm start trains in one process; expected TRAIN_WORLD_SIZE=1 for a warm start")
    family = model_family(spec)  # before seeding, as for one process
    if brings_own_step(family):
        raise RankError(
            f"MODEL_TYPE={params.model_type} brings its own train_step; TRAIN_WORLD_SIZE>1 trains with ml8s's "
            "cross-entropy step only (a plug-in step cannot be weighted by each rank's rows): expected "
            "TRAIN_WORLD_SIZE=1 or a family without train_step"
        )
    if params.train_device == "cuda":
        if torch.cuda.device_count() <= world.local_rank:
            raise RankError(
                f"rank {world.rank} needs GPU {world.local_rank}; {torch.cuda.device_count()} visible here "
                "(NCCL takes one GPU per rank)"
            )
        torch.cuda.set_device(world.local_rank)  # "cuda" below is this rank's GPU
    device = seed_everything(params.random_seed, params.train_device)
    began = began_rng(params.random_seed)
    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
    open_group(world, device)
    try:
        out_dir = _rank0_dir(out_dir)
        data = read_training_data(spec, features_dir, device)
        train_idx = data.train_index()
        if len(train_idx) < world.world_size:
            raise RankError(
                f"{len(train_idx)} training rows for TRAIN_WORLD_SIZE={world.world_size}; expected at least one "
                "row per rank"
            )
        model = family.build(data.model_spec).to(device)
        optimizer = adam(model.parameters(), params.learning_rate)
        losses, steps = ddp_fit(spec, model, optimizer, data.x, data.y, train_idx, world)
        receipts = _gather(_write_shard(spec, model, world, out_dir), world)
        summary = None
        if world.rank == 0:
            write_metadata(open_store(_file_uri(out_dir)), SHARD_PREFIX, receipts, plan=WriterConfig().plan)
            spec.log("train", f"rank 0 wrote {SHARD_PREFIX}.metadata.json for {len(receipts)} shards, last")
            summary = write_trained(
                spec, data, model, optimizer, cold_state(model, steps, device, began), losses, out_dir
            )
        return RankResult(summary=_from_rank0(summary), out_dir=out_dir)
    finally:
        close_group()


def _rank0_dir(out_dir: str) -> str:
    """Rank 0's output directory on every rank (under Flyte each worker has its own working directory)."""
    holder: list[object] = [os.path.abspath(out_dir)]
    dist.broadcast_object_list(holder, src=0)
    chosen = holder[0]
    if not isinstance(chosen, str):
        raise RankError(f"rank 0 sent {chosen!r} as its output directory; expected a path")
    os.makedirs(chosen, exist_ok=True)
    return chosen


def _from_rank0(summary: TrainSummary | None) -> TrainSummary:
    """Rank 0's train summary, on every rank."""
    holder: list[object] = [summary.model_dump_json() if summary is not None else None]
    dist.broadcast_object_list(holder, src=0)
    text = holder[0]
    if not isinstance(text, str):
        raise RankError("rank 0 sent no train summary")
    return TrainSummary.model_validate_json(text)


def _write_shard(spec: RunSpec, model: torch.nn.Module, world: RankEnv, out_dir: str) -> ShardReceipt:
    """This rank's shard of the trained weights (the plan of ml8s.shards over the full state dict)."""
    state = {name: t.detach().to("cpu").contiguous() for name, t in sorted(model.state_dict().items())}
    checkpoint_id = hashlib.sha256(native_bytes(model)).hexdigest()
    pieces = pieces_for_rank(state, world.rank, world.world_size)
    receipt = write_shard(
        open_store(_file_uri(out_dir)), SHARD_PREFIX, world.rank, world.world_size, pieces, checkpoint_id=checkpoint_id
    )
    shard = receipt.shard
    # the pid goes to the log only, never into the shard: the bytes must not depend on the process
    spec.log(
        "train",
        f"rank {world.rank}/{world.world_size} pid {os.getpid()} wrote {shard.file} "
        f"({shard.size} bytes, {shard.tensor_count} tensors, sha256 {shard.sha256})",
    )
    return receipt


def _gather(receipt: ShardReceipt, world: RankEnv) -> list[ShardReceipt]:
    """Every rank's receipt, in rank order, on every rank."""
    texts: list[object] = [None] * world.world_size
    dist.all_gather_object(texts, receipt.model_dump_json())
    receipts = [ShardReceipt.model_validate_json(t) for t in texts if isinstance(t, str)]
    if len(receipts) != world.world_size:
        raise RankError(f"gathered {len(receipts)} shard receipts from {world.world_size} ranks")
    return receipts


def error_path(error_dir: str, rank: int) -> str:
    """Where a failing rank leaves its error code and message (``launch_ranks`` reads it)."""
    return os.path.join(error_dir, f"rank_{rank}.error")


def _file_uri(path: str) -> str:
    return "file://" + os.path.abspath(path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ml8s.training.ranks REQUEST_JSON``: one rank, as ``launch_ranks`` starts it."""
    die_with_parent()  # an orphaned rank would keep training into a dead run's scratch directory
    log.configure()
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m ml8s.training.ranks REQUEST_JSON", file=sys.stderr)
        return 2
    with open(args[0], "rb") as handle:
        request = RankRequest.model_validate_json(handle.read())
    world = RankEnv.from_env(os.environ)
    try:
        result = train_rank(request.spec, request.features_dir, request.out_dir, world)
    except Ml8sError as exc:
        with open(error_path(request.error_dir, world.rank), "w", encoding="utf-8") as handle:
            handle.write(f"{exc.code}\n{exc.message}")
        print(f"rank {world.rank}: {exc}", file=sys.stderr)
        return 1
    if world.rank == 0:
        with open(request.summary_path, "w", encoding="utf-8") as handle:
            handle.write(result.summary.model_dump_json())
    return 0


if __name__ == "__main__":
    end_process(main())
