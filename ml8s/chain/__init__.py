"""The model chain (SPEC §7): hash-linked, tamper-evident model versions shared by many committers.

One implementation for every backend (``ml8s.store.Store``); see docs/chain.md for the operator's view.
Everything outside this package uses the chain through the names below, never through its modules.
Inside, imports go one way: the storage layer (``ChainVersions``: paths, head, versions, caches), then
the run index, the commit protocol and retries on top of it, then the ``ChainStore`` facade.
"""

from ml8s.chain._util import content_hash, sha256_hex
from ml8s.chain.anchor import Anchor, Checkpoint, make_anchor, proof_anchor_problems, read_anchor
from ml8s.chain.chain_store import ChainStore
from ml8s.chain.checkpoint import (
    WEIGHTS_DELTA,
    WEIGHTS_FULL,
    CheckpointBuilder,
    delta_due,
    hash_checkpoint,
    hashed_checkpoint,
    nan_weight_error,
)
from ml8s.chain.evidence import named_versions
from ml8s.chain.findings import WEIGHTS_UNCHECKED, Finding, VerifyReport
from ml8s.chain.follower import Follower
from ml8s.chain.gc import GcReport, collect_garbage
from ml8s.chain.integrity import WeightsCheck, find_corruption, verify_chain
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.listing import ChainEntry, chain_entries, chain_names, chains_holding
from ml8s.chain.models import (
    Block,
    BlockHeader,
    ChainHead,
    ChainVersion,
    CommitMeta,
    LocalFile,
    PayloadBuilder,
    PayloadFile,
    PayloadKind,
    PayloadSource,
    WeightsFields,
)
from ml8s.chain.payload import local_file
from ml8s.chain.promotion import Decision, PromotionAction, PromotionLog, SignedDecision
from ml8s.chain.promotion_pin import PromotionPin, PromotionReader
from ml8s.chain.retry import RetryPolicy, commit_with_retry, to_stderr
from ml8s.chain.root import ENV_TRUST_ROOT, TrustRoot, load_root, make_root, root_json
from ml8s.chain.runindex import committed
from ml8s.chain.safetensors_check import SafetensorsSummary, check_safetensors
from ml8s.chain.signing import ENV_KEY, ENV_KEY_FILE, KEY_MAX_BYTES, SigningKey
from ml8s.chain.trust import TrustPolicy, adopt_policy, load_policies
from ml8s.chain.trusted import ReadTrust, TrustedReader
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import block_hash_of

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "ENV_TRUST_ROOT",
    "KEY_MAX_BYTES",
    "RECORD_MAX_BYTES",
    "WEIGHTS_DELTA",
    "WEIGHTS_FULL",
    "WEIGHTS_UNCHECKED",
    "Anchor",
    "Block",
    "BlockHeader",
    "ChainEntry",
    "ChainHead",
    "ChainStore",
    "ChainVersion",
    "ChainVersions",
    "Checkpoint",
    "CheckpointBuilder",
    "CommitMeta",
    "Decision",
    "Finding",
    "Follower",
    "GcReport",
    "LocalFile",
    "PayloadBuilder",
    "PayloadFile",
    "PayloadKind",
    "PayloadSource",
    "PromotionAction",
    "PromotionLog",
    "PromotionPin",
    "PromotionReader",
    "ReadTrust",
    "RetryPolicy",
    "SafetensorsSummary",
    "SignedDecision",
    "SigningKey",
    "TrustPolicy",
    "TrustRoot",
    "TrustedReader",
    "VerifyReport",
    "WeightsCheck",
    "WeightsFields",
    "adopt_policy",
    "block_hash_of",
    "chain_entries",
    "chain_names",
    "chains_holding",
    "check_safetensors",
    "collect_garbage",
    "commit_with_retry",
    "committed",
    "content_hash",
    "delta_due",
    "find_corruption",
    "hash_checkpoint",
    "hashed_checkpoint",
    "load_policies",
    "load_root",
    "local_file",
    "make_anchor",
    "make_root",
    "named_versions",
    "nan_weight_error",
    "proof_anchor_problems",
    "read_anchor",
    "root_json",
    "sha256_hex",
    "to_stderr",
    "verify_chain",
]
