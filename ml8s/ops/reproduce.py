"""``ml8s chain reproduce``: re-train versions of a chain from their recorded parents and data, and compare.

Each version from ``--from K`` + 1 to the head is re-trained in a scratch pipeline root: its canonical
config comes from the config snapshot its payload holds, WARM_START is the parent's content hash (read from
the same chain), and the data is the DATA_ROOT the version recorded (its files must still be there,
unchanged: bootstrap checks them against the lineage). Steps 3-5 run (features, training, export), nothing
is registered or committed, and the payload is assembled as the chain commit does. A version matches when
its content hash (every payload file's sha256 and size) equals the block's.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from ml8s.chain import Anchor, ChainStore, ChainVersion, ReadTrust, content_hash, verify_chain
from ml8s.context.run import RunContext
from ml8s.contract import ConfigSnapshot, ContractFile, FingerprintRecord, TrainingMetadata, layout, parse
from ml8s.contract._parse import Invalid
from ml8s.contract.artifact import ArtifactDigest
from ml8s.contract.chain_manifest import ChainManifest
from ml8s.errors import ConfigError, Ml8sError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.settings import PLATFORM_VARIABLES
from ml8s.identity.variables import USER_VARIABLES, JsonValue
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.store import open_store
from ml8s.tempdirs import owned_tempdir

M = TypeVar("M", bound=ContractFile)


class Reproduction(BaseModel):
    """One version's outcome: its content hash, the re-trained one, and the payload files that differ."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    counter: int
    run_id: str
    content_hash: str
    reproduced_hash: str = ""
    differing: tuple[str, ...] = ()
    reason: str = ""

    @property
    def matches(self) -> bool:
        return bool(self.reproduced_hash) and self.reproduced_hash == self.content_hash


def reproduce_chain(
    root_uri: str,
    chain_name: str,
    start: int,
    *,
    report: Callable[[Reproduction], None] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    trust: ReadTrust | None = None,
    anchor: Anchor | None = None,
) -> list[Reproduction]:
    """Re-train every version above ``start`` (a counter on the chain) and compare; ``report`` sees each result,
    ``progress`` a line as each version starts training and comparing (a re-training takes minutes).

    The chain is verified first as every reader checks it (``trust``: the pinned root and CHAIN_REQUIRE_SIGNED);
    ChainCorruptionError when it has findings: a forged or rolled-back history is not worth hours of training,
    and "reproduced" must be said of the versions the chain really holds. With ``anchor`` (``--anchor``), the
    chain is also checked against it, as verify checks it: a rolled-back or rewritten history is refused too."""
    trust = trust or ReadTrust()
    chain = ChainStore(open_store(root_uri), chain_name, trust_root=trust.root)
    chain.require_head()  # a chain never initialized is named as such, not reported as corrupted
    checked = verify_chain(chain, payloads=False, root=trust.root, require_signed=trust.require_signed, anchor=anchor)
    checked.raise_for_findings()
    on_chain = set(checked.chain)
    walked = [v for v in chain.walk() if v.version_dir in on_chain]
    versions = [v for v in walked if v.counter > start]
    if start > 0:
        chain.get(start)  # VersionNotFoundError when K is not on the chain
    if not versions:  # --from the head: "0/0 versions reproduced", exit 1, said nothing of why
        head = max((v.counter for v in walked), default=0)
        raise ConfigError(
            f"--from {start}: chain {chain_name!r} holds no version above v{start} (its head is v{head}); expected a "
            "counter below the head (0: every version)"
        )
    results = []
    ordered = sorted(versions, key=lambda v: v.counter)
    for n, version in enumerate(ordered, 1):
        progress(
            f"v{version.counter} ({n}/{len(ordered)}): training run {version.header.run_id or '-'} in a scratch root"
        )
        result = _reproduce(root_uri, chain, version, progress)
        if report is not None:
            report(result)
        results.append(result)
    return results


def _reproduce(
    root_uri: str, chain: ChainStore, version: ChainVersion, progress: Callable[[str], None]
) -> Reproduction:
    header = version.header
    base = Reproduction(counter=version.counter, run_id=header.run_id, content_hash=version.content_hash)
    snapshot = _payload_file(chain, version, layout.PAYLOAD_CONFIG_SNAPSHOT, layout.CONFIG_SNAPSHOT, ConfigSnapshot)
    if isinstance(snapshot, str):
        return base.model_copy(update={"reason": snapshot})
    recorded = _payload_file(
        chain, version, layout.PAYLOAD_DATA_FINGERPRINT, layout.DATA_FINGERPRINT, FingerprintRecord
    )
    if isinstance(recorded, str):
        return base.model_copy(update={"reason": recorded})
    paths = {entry.relative_path for entry in recorded.files}
    with owned_tempdir(f"ml8s-reproduce-v{version.counter}-") as scratch:
        strict = hashed_its_data(snapshot.canonical_config, header.full_config_hash)
        env = _environment(snapshot.canonical_config, root_uri, chain.name, os.path.join(scratch, "root"), strict)
        try:
            ctx = bootstrap(env, data_files=paths, commits=False)
            if ctx.identity.full_config_hash != header.full_config_hash:
                return base.model_copy(
                    update={
                        "reason": f"the identity is now {ctx.run_id}, not {header.run_id}: the data under "
                        f"{ctx.params.data_root} or the model code changed since"
                    }
                )
            if ctx.identity.data_fingerprint != snapshot.data_fingerprint:  # a STRICT_DATA_IDENTITY=false version
                return base.model_copy(
                    update={
                        "reason": f"the data fingerprint is now {ctx.identity.data_fingerprint[:12]}, not "
                        f"{snapshot.data_fingerprint[:12]}: the files it recorded under {ctx.params.data_root} "
                        "changed since"
                    }
                )
            files = _retrain(ctx, scratch)
        except Ml8sError as exc:
            return base.model_copy(update={"reason": exc.message})
    progress(f"v{version.counter}: comparing {len(files)} re-trained payload files with the block's")
    entries = sorted((name, hashlib.sha256(data).hexdigest(), len(data)) for name, data in files.items())
    theirs = {f.name: (f.sha256, f.size) for f in header.files}
    differing = tuple(sorted({n for n, s, z in entries if theirs.get(n) != (s, z)} | (set(theirs) - set(files))))
    return base.model_copy(update={"reproduced_hash": content_hash(entries), "differing": differing})


def _payload_file(chain: ChainStore, version: ChainVersion, name: str, rel: str, model: type[M]) -> M | str:
    """A run file the version's payload holds, parsed; else why not (a reason line, never an exception)."""
    if name not in {f.name for f in version.header.files}:
        return f"its payload holds no {name} (committed before canonicalization 2.1.0)"
    try:
        return parse(rel, chain.fetch_payload(version, name), model)
    except Invalid as exc:
        return f"its {name} is unreadable: {exc}"


def hashed_its_data(config: Mapping[str, JsonValue], full_config_hash: str) -> bool:
    """Whether a version's identity hashed its data fingerprint: STRICT_DATA_IDENTITY is a platform setting no
    payload records, but a run with it false has the full config hash of its config alone (hashing.py)."""
    return compute_identity(dict(config), "", strict=False).full_config_hash != full_config_hash


def _environment(
    config: Mapping[str, JsonValue], root_uri: str, chain_name: str, scratch_root: str, strict: bool
) -> dict[str, str]:
    """The run's variables as a user would have set them, the parent chain where the version lives, and the
    version's STRICT_DATA_IDENTITY (only the files it recorded are read either way)."""
    env = {name: _text(config.get(name.lower())) for name in USER_VARIABLES}
    env |= {
        "PIPELINE_ROOT_URI": scratch_root,
        "WARM_START_ROOT_URI": root_uri,
        "CHAIN_NAME": chain_name,
        "MLFLOW_TRACKING_URI": f"sqlite:///{scratch_root}/mlflow.db",
        "FORCE_RERUN": "false",
        "STRICT_DATA_IDENTITY": "true" if strict else "false",
    }
    # the rest of the environment (S3 credentials, endpoints) as it is; no other setting of the caller's
    kept = {k: v for k, v in os.environ.items() if k not in USER_VARIABLES and k not in PLATFORM_VARIABLES}
    return {**kept, **env}


def _retrain(ctx: RunContext, scratch: str) -> dict[str, bytes]:
    """Steps 3-5 into scratch directories; the payload files as the chain commit would hold them."""
    from ml8s.pipeline.export import export
    from ml8s.pipeline.features import compute_features
    from ml8s.pipeline.train import train_all_ranks

    spec = ctx.spec
    features, model, exported = (os.path.join(scratch, d) for d in ("features", "model", "export"))
    compute_features(spec, features)
    summary = train_all_ranks(spec, features, model)
    export(spec, summary, features, model, exported)
    version = ctx.identity.canonicalization_version
    run_files = {
        layout.CONFIG_SNAPSHOT: ConfigSnapshot.of(ctx.identity).to_bytes(),
        layout.DATA_FINGERPRINT: FingerprintRecord.of(ctx.fingerprint).to_bytes(),
    }
    for rel, directory in (
        (layout.FEATURE_SCHEMA, features),
        (layout.MODEL_NATIVE, model),
        (layout.MODEL_TRAINING_STATE, model),
        (layout.model_export(ctx.params.model_format), exported),
        (layout.TRAINING_METADATA, exported),
        *((rel, model) for rel in layout.sharded_artifacts(ctx.params.train_world_size)),
    ):
        with open(os.path.join(directory, os.path.basename(rel)), "rb") as handle:
            run_files[rel] = handle.read()
    metadata = parse(layout.TRAINING_METADATA, run_files[layout.TRAINING_METADATA], TrainingMetadata)
    digests = dict(metadata.artifacts)
    for rel in layout.identity_artifacts():
        digests[rel] = ArtifactDigest(sha256=hashlib.sha256(run_files[rel]).hexdigest(), size=len(run_files[rel]))
    manifest = ChainManifest(
        run_id=ctx.run_id,
        full_config_hash=ctx.identity.full_config_hash,
        data_fingerprint=ctx.identity.data_fingerprint,
        canonicalization_version=version,
        artifacts=dict(sorted(digests.items())),
    )
    payload = {
        name: run_files[rel]
        for name, rel in layout.chain_payload_files(ctx.params.model_format, version, ctx.params.train_world_size)
        if name != layout.PAYLOAD_MANIFEST
    }
    payload[layout.PAYLOAD_MANIFEST] = manifest.to_bytes()
    return payload


def _text(value: JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
