"""Step 4 for a warm start: continue the parent's training on the lineage's whole history.

The parent's weights, Adam state and RNG states are restored exactly; batches are drawn by the recency
sampler (weights ``(g + 1) ** SAMPLER_ALPHA`` per generation) from the memory-mapped record history,
continuing the parent's random stream. One epoch is as many batches as the new generations have training
rows (at least one batch), so EPOCHS means what it means for a cold start: passes over the new data's size.
"""

from __future__ import annotations

import math

import safetensors.torch
import torch

from ml8s.context.run import RunSpec
from ml8s.contract import layout
from ml8s.contract.training_state import Generation, TrainingState
from ml8s.errors import (
    GenerationMissingError,
    LineageError,
    RecordsChecksumError,
    RecordsExtraBytesError,
    RecordsTruncatedError,
    TrainingError,
)
from ml8s.features.warm import history_for, read_generations
from ml8s.lineage import LineagePlan, parent_split, parent_version
from ml8s.lineage.history import with_rebuild_hint
from ml8s.modeling.family import ModelFamily
from ml8s.modeling.registry import cross_entropy_step
from ml8s.records import RecencySampler, SamplerConfig, gather
from ml8s.tempdirs import owned_tempdir
from ml8s.training.optim import adam
from ml8s.training.state import capture_rng, load_optimizer, read_state, restore_rng


def warm_fit(
    spec: RunSpec,
    plan: LineagePlan,
    family: ModelFamily,
    model: torch.nn.Module,
    device: torch.device,
    features_dir: str,
) -> tuple[torch.optim.Optimizer, list[float], TrainingState]:
    """Continue training ``model`` (freshly built) from the parent; returns the optimizer, the loss per epoch
    and the new training state."""
    params = spec.params
    chain, parent = parent_version(plan.parent)
    where = f"chain {chain.name!r} v{parent.counter}"
    try:
        model.load_state_dict(safetensors.torch.load(chain.fetch_payload(parent, layout.PAYLOAD_WEIGHTS)))
    except RuntimeError as exc:
        raise LineageError(f"{where}: its weights do not fit this run's network: {str(exc).splitlines()[0]}") from exc
    model.to(device)
    state, tensors = read_state(chain.fetch_payload(parent, layout.PAYLOAD_TRAINING_STATE), f"{where} training state")
    names = [name for name, _ in model.named_parameters()]
    if state.parameter_names != names:
        raise LineageError(f"{where} trained parameters {state.parameter_names}; this network has {names}")
    optimizer = adam(model.parameters(), params.learning_rate)
    load_optimizer(model, optimizer, tensors, where)
    restore_rng(state.rng, device)
    generations = read_generations(features_dir)
    step = family.train_step or cross_entropy_step
    losses: list[float] = []
    with owned_tempdir("ml8s-history-") as cache:
        history = history_for(spec, plan, features_dir)
        try:
            mapped = history.open_mapped(cache)
        except (RecordsChecksumError, RecordsTruncatedError, RecordsExtraBytesError, GenerationMissingError) as exc:
            raise with_rebuild_hint(history, exc) from exc
        rows = _rows(generations, mapped.generation_rows)
        config = SamplerConfig(alpha=params.sampler_alpha, batch_size=params.batch_size, seed=params.random_seed)
        # another TEST_SIZE gives every generation another number of training rows: the parent's stream drew
        # from a history this run does not have, so the sampler starts afresh (seeded, so reproducible)
        same_split = parent_split(chain, parent) == (params.random_seed, params.test_size)
        sampler = (
            RecencySampler.continued(state.sampler, rows, config)
            if state.sampler is not None and same_split
            else RecencySampler(rows, config)
        )
        new = [g for g in generations[len(generations) - plan.new :]] if plan.new else generations[-1:]
        batches = max(1, math.ceil(sum(g.records or 0 for g in new) / params.batch_size))
        maps = mapped.maps[: len(rows)]
        model.train()
        for epoch in range(params.epochs):
            total = 0.0
            for _ in range(batches):
                x, y = gather(maps, sampler.sample())
                loss = step(model, optimizer, torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
                total += float(loss.item())
            mapped.release()  # the resident set stays bounded by one epoch's pages, whatever the history's size
            mean = total / batches
            if not math.isfinite(mean):
                raise TrainingError(f"training loss is {mean} at epoch {epoch + 1}; expected a finite loss")
            losses.append(mean)
            spec.log("train", f"epoch {epoch + 1}/{params.epochs} loss {mean:.6f} ({batches} batches from history)")
        sampler_state = sampler.state()
    new_state = TrainingState(
        state_version=state.state_version,
        lineage_id=plan.lineage_id,
        parent_content_hash=plan.parent.content_hash,
        generations=generations,
        global_step=state.global_step + params.epochs * batches,
        trainings=state.trainings + 1,
        parameter_names=names,
        rng=capture_rng(device, state.rng),  # the parent's, as restored: training draws none
        sampler=sampler_state,
    )
    return optimizer, losses, new_state


def _rows(generations: list[Generation], history_rows: tuple[int, ...]) -> tuple[int, ...]:
    recorded = tuple(g.records or 0 for g in generations)
    if history_rows[: len(recorded)] != recorded:
        raise LineageError(
            f"the lineage history holds generations of {list(history_rows)[:8]} rows; this run's generations have "
            f"{list(recorded)[:8]}"
        )
    return recorded
