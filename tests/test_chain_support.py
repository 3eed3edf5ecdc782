"""Shared helpers and fixtures of the chain tests (no tests here): payloads, metas, stores, workers, forgery.

Worker functions live here, at module level, so spawned processes can import them by name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from process_support import PRELOAD, process_context, reap
from s3_servers import RadosGW, S3Endpoint

from ml8s.chain import ChainStore, ChainVersion, CommitMeta, RetryPolicy, paths
from ml8s.chain._util import content_hash
from ml8s.chain.models import ChainHead, PayloadFile
from ml8s.chain.wire import content_hash_txt, encode_block, head_json, make_block, metadata_json
from ml8s.store import LocalStore, ObjectInfo, S3Store, Store, Versioned, WriteResult

CHAIN = "line"
IMPORTED_IN = os.getpid()  # a fork of the warm server finds the server's pid here (test_process_support.py)
FAST = RetryPolicy(max_attempts=400, base_delay_s=0.02, max_delay_s=0.5)

# A store named by plain data, so it can be handed to a spawned process: ("local", root) or ("s3", uri, env).
StoreSpec = tuple[Any, ...]


def open_spec(spec: StoreSpec) -> Store:
    if spec[0] == "local":
        return LocalStore(spec[1])
    return S3Store(spec[1], env=spec[2])


def run_hash(name: str) -> str:
    return hashlib.sha256(f"run:{name}".encode()).hexdigest()


def meta(name: str, *, step: int | None = None, arch: str = "mlp[8,8]", params: int = 1000, **extra: Any) -> CommitMeta:
    fch = run_hash(name)
    return CommitMeta(
        run_id=fch[:12],
        full_config_hash=fch,
        artifact_root=f"file:///runs/{fch[:12]}",
        architecture=arch,
        parameter_count=params,
        global_step=step,
        **extra,
    )


def payload(name: str, size: int = 256) -> dict[str, bytes]:
    """Deterministic, distinct per name; ``model.bin`` has exactly ``size`` bytes."""
    seed = hashlib.sha256(name.encode()).digest()
    body = (seed * (size // len(seed) + 1))[:size]
    return {"model.bin": body, "config.json": b'{"name": "' + name.encode() + b'"}'}


def build(chain: ChainStore, count: int) -> list[ChainVersion]:
    """Genesis plus ``count`` versions (global_step 10 per version), returned genesis first."""
    chain.init()
    for i in range(1, count + 1):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=10 * i))
    return chain.list()


@pytest.fixture(name="local_root")
def local_root_fixture(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture(name="chain")
def chain_fixture(local_root: Path) -> ChainStore:
    return ChainStore(LocalStore(str(local_root)), CHAIN)


@pytest.fixture(name="rgw_spec")
def rgw_spec_fixture(radosgw_server: RadosGW) -> StoreSpec:
    bucket = radosgw_server.make_bucket()
    return ("s3", f"s3://{bucket}/pipeline", radosgw_server.env())


@pytest.fixture(name="spec", params=["local", "radosgw"])
def local_or_radosgw_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    """The store-writer attacks on both backends: every check goes through the store's API, never a file path.
    Import it (and rgw_spec_fixture) into a module to parametrize its ``spec`` tests."""
    if request.param == "local":
        return ("local", str(tmp_path / "root"))
    spec: StoreSpec = request.getfixturevalue("rgw_spec")
    return spec


@pytest.fixture(name="moto_spec")
def moto_spec_fixture(moto_server: S3Endpoint) -> StoreSpec:
    bucket = moto_server.make_bucket()
    return ("s3", f"s3://{bucket}/pipeline", moto_server.env())


# -- workers (run in spawned processes) ------------------------------------------------------------
def commit_worker(spec: StoreSpec, worker: int, commits: int, barrier: Any, results: Any) -> None:
    """Commit ``commits`` distinct runs with retry; report (worker, [(counter, hash), ...]) or the error."""
    try:
        chain = ChainStore(open_spec(spec), CHAIN)
        barrier.wait()
        done = []
        for i in range(commits):
            version = chain.commit_with_retry(payload(f"w{worker}-{i}"), meta(f"w{worker}-{i}"), FAST)
            done.append((version.counter, version.block_hash))
        results.put((worker, done))
    except BaseException as exc:
        import traceback

        results.put((worker, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def race_worker(spec: StoreSpec, name: str, parent: str | None, retry: bool, barrier: Any, results: Any) -> None:
    """One commit of run ``name`` (from ``parent`` when given); report the outcome's name and counter."""
    try:
        chain = ChainStore(open_spec(spec), CHAIN)
        barrier.wait()
        if retry:
            version = chain.commit_with_retry(payload(name), meta(name), FAST)
        else:
            version = chain.commit(payload(name), meta(name), expected_parent=parent)
        results.put(("won", version.counter, version.block_hash))
    except BaseException as exc:
        results.put((type(exc).__name__, -1, str(exc)))


def determinism_worker(root: str, barrier: Any, results: Any) -> None:
    """Commit the same payload and meta into a fresh chain; report what must not depend on the process."""
    chain = ChainStore(LocalStore(root), CHAIN)
    barrier.wait()
    version = chain.commit(payload("same"), meta("same", step=7))
    stored = {f.name: chain.fetch_payload(version, f.name) for f in version.header.files}
    results.put(
        (
            version.content_hash,
            [f.model_dump() for f in version.header.files],
            chain.store.get(chain.version_key(version.version_dir, paths.CONTENT_HASH)),
            stored,
            (version.counter, version.semver, version.header.parent_semver),
        )
    )


# -- a store wrapper that injects faults ----------------------------------------------------------
class HookStore(Store):
    """Delegates to ``inner``; ``before_swap`` runs before every put_if_match of a chain.json and may raise."""

    def __init__(self, inner: Store, before_swap: Callable[[str, bytes, str | None], None]) -> None:
        self.inner, self.before_swap, self.root_uri = inner, before_swap, inner.root_uri

    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        if key.endswith(paths.HEAD):
            self.before_swap(key, data, token)
        return self.inner.put_if_match(key, data, token)

    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        return self.inner.put_atomic(key, data, tmp_key=tmp_key)

    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        return self.inner.put_file_atomic(key, path, tmp_key=tmp_key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, *, if_match: str | None = None, max_bytes: int | None = None) -> bytes:
        return self.inner.get(key, if_match=if_match, max_bytes=max_bytes)

    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        return self.inner.get_versioned(key, max_bytes=max_bytes)

    def download(self, key: str, path: str) -> WriteResult:
        return self.inner.download(key, path)

    def digest(self, key: str) -> WriteResult:
        return self.inner.digest(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str) -> list[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


# -- forgery on a local chain ------------------------------------------------------------------------
def version_path(root: Path, version_dir: str) -> Path:
    return root / paths.ROOT / CHAIN / paths.VERSIONS / version_dir


def set_head(root: Path, version: ChainVersion) -> None:
    head = ChainHead(
        chain_name=CHAIN, counter=version.counter, block_hash=version.block_hash, version_dir=version.version_dir
    )
    (root / paths.ROOT / CHAIN / paths.HEAD).write_bytes(head_json(head))


def forge(
    root: Path,
    version: ChainVersion,
    *,
    keep_original: bool = False,
    new_payload: Mapping[str, bytes] | None = None,
    **changes: Any,
) -> ChainVersion:
    """Rewrite ``version`` with header ``changes`` (and payload), re-hashed consistently under a new name:
    a forgery only the links around it can reveal."""
    if new_payload is not None:
        files = tuple(
            PayloadFile(name=n, sha256=hashlib.sha256(d).hexdigest(), size=len(d))
            for n, d in sorted(new_payload.items())
        )
        changes["files"] = files
        changes["content_hash"] = content_hash((f.name, f.sha256, f.size) for f in files)
    header = version.header.model_copy(update=changes)
    block = make_block(header)
    forged = ChainVersion(block=block, version_dir=paths.version_dir(header.counter, header.semver, block.block_hash))
    source, target = version_path(root, version.version_dir), version_path(root, forged.version_dir)
    shutil.copytree(source, target)
    if not keep_original:
        shutil.rmtree(source)
    if new_payload is not None:
        shutil.rmtree(target / paths.PAYLOAD)
        for name, data in new_payload.items():
            (target / paths.PAYLOAD / name).parent.mkdir(parents=True, exist_ok=True)
            (target / paths.PAYLOAD / name).write_bytes(data)
    (target / paths.BLOCK).write_bytes(encode_block(block))
    (target / paths.METADATA).write_bytes(metadata_json(block))
    (target / paths.CONTENT_HASH).write_bytes(content_hash_txt(block))
    return forged


def spawn_all(
    target: Callable[..., None], arg_sets: list[tuple[Any, ...]], timeout: float = 120.0, *, fresh: bool = False
) -> Iterator[Any]:
    """Run ``target(*args, barrier, results)`` in one process of its own per arg set, all released together:
    forks of the warm fork server (process_support), or with ``fresh`` fresh interpreters, each with its own
    hash seed (a test that proves bytes do not depend on the process)."""
    ctx = process_context(fresh=fresh)
    barrier, results = ctx.Barrier(len(arg_sets)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, results)) for args in arg_sets]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            yield results.get(timeout=timeout)
    finally:
        reap(procs, timeout=30)


def preload_worker(barrier: Any, results: Any) -> None:
    """Report, per module the fork server preloads, the pid of the process that imported it (None: not imported)."""
    barrier.wait()
    results.put(
        (os.getpid(), os.getppid(), {name: getattr(sys.modules.get(name), "IMPORTED_IN", None) for name in PRELOAD})
    )
