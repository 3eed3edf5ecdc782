"""The run object: one model per run, handed to every step, and the one projection that keys the cache.

A run is a :class:`RunSpec` (what the compute steps' output depends on: the identity, the validated
parameters, the data fingerprint) plus the platform settings (where it is written, whether it is
forced, which MLflow and chain it reports to). :class:`RunContext` holds exactly those two parts, so
the identity lives in one place: ``ctx.spec``. ``ctx.identity``, ``ctx.params`` and ``ctx.fingerprint``
read through to it.

Why a spec inside the run rather than two parallel models: the compute steps (features, training,
export) must be cached on what determines their bytes and on nothing else, so their input is the spec
alone; every other step needs the settings too and takes the whole run. No step receives both, and
no value is carried twice.

Resources are not part of the model: :meth:`RunContext.open_store` opens the pipeline root once, the
caller (a Flyte task, or ``run_pipeline`` for a whole run) passes that store down to every step it calls,
and :class:`ArtifactWriter` writes atomically through it with tmp names ``.tmp/{component}-{workerid}.{ext}``.
"""

from __future__ import annotations

import logging
import os

from pydantic import BaseModel, ConfigDict, model_validator

from ml8s.contract import layout
from ml8s.data.fingerprint import Fingerprint
from ml8s.errors import ConfigError
from ml8s.identity.hashing import RunIdentity
from ml8s.identity.params import RunParams
from ml8s.identity.settings import PlatformSettings, worker_id
from ml8s.lineage import LineagePlan
from ml8s.store import Store, WriteResult, open_store

log = logging.getLogger("ml8s")


class RunSpec(BaseModel):
    """What a compute step's output depends on, and nothing else: the run without its platform settings.

    Feature engineering, training and export read only this, so it is their Flyte cache key: two runs of
    one configuration on the same data have equal specs wherever they write (PIPELINE_ROOT_URI) and
    whichever MLflow they report to. The fingerprint entries are part of it, so the key names the exact
    bytes the loader will accept, strict identity or not.

    ``recompute_token`` is empty except on a forced re-run, where bootstrap draws a fresh random token: the
    key of a forced run then matches no cached result, so Steps 2-7 are computed again wherever a cache
    sits in front of them. It is a cache key and nothing else: no step reads it, and it never reaches an
    artifact, a hash of the run or a path.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    identity: RunIdentity
    params: RunParams
    fingerprint: Fingerprint
    recompute_token: str = ""
    lineage: LineagePlan | None = None  # a warm start's parent and generations (ml8s.lineage)

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    def log(self, step: str, message: str) -> None:
        """One line of what ``step`` does (bootstrap names the run once: ``ml8s.log`` lines are for people)."""
        log.info("%s", message, extra={"step": step})


class RunContext(BaseModel):
    """One run: its spec (identity, parameters, fingerprint) and its platform settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: RunSpec
    settings: PlatformSettings

    @model_validator(mode="after")
    def _forced_means_recomputed(self) -> RunContext:
        """FORCE_RERUN and a recompute token go together: a forced run must never hit a cache."""
        if self.settings.force_rerun != bool(self.spec.recompute_token):
            raise ConfigError(
                f"run {self.spec.run_id}: FORCE_RERUN={str(self.settings.force_rerun).lower()} but the spec "
                f"{'has' if self.spec.recompute_token else 'has no'} recompute token; expected a token exactly "
                "when the run is forced (build runs with ml8s.pipeline.bootstrap)"
            )
        return self

    @property
    def identity(self) -> RunIdentity:
        return self.spec.identity

    @property
    def params(self) -> RunParams:
        return self.spec.params

    @property
    def fingerprint(self) -> Fingerprint:
        return self.spec.fingerprint

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def prefix(self) -> str:
        """ARTIFACT_ROOT as a key relative to the pipeline root."""
        return layout.run_prefix(self.run_id)

    @property
    def artifact_root(self) -> str:
        return f"{self.settings.pipeline_root_uri}/{self.prefix}"

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def uri(self, rel: str) -> str:
        return f"{self.artifact_root}/{rel}"

    def read_record(self, store: Store, rel: str, max_bytes: int = layout.RECORD_MAX_BYTES) -> bytes:
        """A record of the run read whole, up to ``max_bytes``: a planted multi-GB object (or a sparse file, a
        link to /dev/zero) is ObjectTooLargeError naming it, its size and the bound, never read into memory."""
        return store.get(self.key(rel), max_bytes=max_bytes)

    def open_store(self) -> Store:
        """The pipeline root's store: open it once per step (or per process) and pass it down."""
        return open_store(self.settings.pipeline_root_uri)

    def writer(self, store: Store) -> ArtifactWriter:
        return ArtifactWriter(store, self)

    def log(self, step: str, message: str) -> None:
        """One line of what ``step`` does."""
        self.spec.log(step, message)

    def to_json(self) -> str:
        """The run as JSON, for handing it to another process (``from_json`` reads it back, without the env)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> RunContext:
        return cls.model_validate_json(text)


class ArtifactWriter:
    """Atomic writes into one run's ARTIFACT_ROOT (SPEC §3)."""

    def __init__(self, store: Store, ctx: RunContext) -> None:
        self.store = store
        self.ctx = ctx
        self.worker = worker_id()

    def write_bytes(self, rel: str, data: bytes, component: str) -> WriteResult:
        result = self.store.put_atomic(self.ctx.key(rel), data, tmp_key=self._tmp_key(rel, component))
        self.ctx.log(component, f"wrote {rel} ({result.size} bytes, sha256 {result.sha256[:12]})")
        return result

    def write_file(self, rel: str, path: str, component: str) -> WriteResult:
        result = self.store.put_file_atomic(self.ctx.key(rel), path, tmp_key=self._tmp_key(rel, component))
        self.ctx.log(component, f"wrote {rel} ({result.size} bytes, sha256 {result.sha256[:12]})")
        return result

    def _tmp_key(self, rel: str, component: str) -> str:
        ext = os.path.splitext(rel)[1].lstrip(".") or "bin"
        return self.ctx.key(f"{layout.TMP_DIR}/{component}-{self.worker}.{ext}")
