"""The run context: everything a pipeline step needs, passed between Flyte tasks as JSON.

It holds the identity (computed once, in bootstrap), the validated parameters, the platform
settings and the fingerprint entries the loader re-checks. ``writer()`` gives atomic writes into
ARTIFACT_ROOT with tmp names ``.tmp/{component}-{workerid}.{ext}``.
"""

from __future__ import annotations

import logging
import os

from pydantic import BaseModel, ConfigDict

from ml8s.contract import layout
from ml8s.data.fingerprint import Fingerprint
from ml8s.identity.hashing import RunIdentity
from ml8s.identity.params import RunParams
from ml8s.identity.settings import PlatformSettings, worker_id
from ml8s.store import Store, WriteResult, open_store

log = logging.getLogger("ml8s")


class RunSpec(BaseModel):
    """What a compute step's output depends on, and nothing else: the run context without the settings.

    Feature engineering, training and export read only this, so it is their Flyte cache key: two runs of
    one configuration on the same data have equal specs wherever they write (PIPELINE_ROOT_URI),
    whether or not FORCE_RERUN is set and whichever MLflow they report to. The fingerprint entries are
    part of it, so the key names the exact bytes the loader will accept, strict identity or not.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    identity: RunIdentity
    params: RunParams
    fingerprint: Fingerprint

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    def log(self, step: str, message: str) -> None:
        """Every step logs RUN_ID and FULL_CONFIG_HASH with what it does."""
        log.info("[%s] run_id=%s full_config_hash=%s %s", step, self.run_id, self.identity.full_config_hash, message)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.model_validate_json(text)


class RunContext(BaseModel):
    """One run's identity, parameters and settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    identity: RunIdentity
    params: RunParams
    settings: PlatformSettings
    fingerprint: Fingerprint

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    @property
    def prefix(self) -> str:
        """ARTIFACT_ROOT as a key relative to the pipeline root."""
        return layout.run_prefix(self.identity.run_id)

    @property
    def artifact_root(self) -> str:
        return f"{self.settings.pipeline_root_uri}/{self.prefix}"

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def uri(self, rel: str) -> str:
        return f"{self.artifact_root}/{rel}"

    def store(self) -> Store:
        return open_store(self.settings.pipeline_root_uri)

    def writer(self, store: Store | None = None) -> ArtifactWriter:
        return ArtifactWriter(store or self.store(), self)

    def log(self, step: str, message: str) -> None:
        """Every step logs RUN_ID and FULL_CONFIG_HASH with what it does."""
        log.info("[%s] run_id=%s full_config_hash=%s %s", step, self.run_id, self.identity.full_config_hash, message)

    def spec(self) -> RunSpec:
        """The part of the context that determines the compute steps' output (no platform settings)."""
        return RunSpec(identity=self.identity, params=self.params, fingerprint=self.fingerprint)

    def to_json(self) -> str:
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
        self.ctx.log(component, f"wrote {rel} ({result.size} bytes, sha256 {result.sha256})")
        return result

    def write_file(self, rel: str, path: str, component: str) -> WriteResult:
        result = self.store.put_file_atomic(self.ctx.key(rel), path, tmp_key=self._tmp_key(rel, component))
        self.ctx.log(component, f"wrote {rel} ({result.size} bytes, sha256 {result.sha256})")
        return result

    def _tmp_key(self, rel: str, component: str) -> str:
        ext = os.path.splitext(rel)[1].lstrip(".") or "bin"
        return self.ctx.key(f"{layout.TMP_DIR}/{component}-{self.worker}.{ext}")
