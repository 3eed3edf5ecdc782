"""The model chain (SPEC §7): hash-linked, tamper-evident model versions shared by many committers.

One implementation for every backend (``ml8s.store.Store``); see docs/chain.md for the operator's view.
"""

from ml8s.chain.follower import Follower
from ml8s.chain.gc import GcReport, collect_garbage
from ml8s.chain.integrity import Finding, VerifyReport, find_corruption, verify_chain
from ml8s.chain.models import Block, BlockHeader, ChainHead, ChainVersion, CommitMeta, PayloadFile, PayloadKind
from ml8s.chain.retry import RetryPolicy
from ml8s.chain.store import ChainStore

__all__ = [
    "Block",
    "BlockHeader",
    "ChainHead",
    "ChainStore",
    "ChainVersion",
    "CommitMeta",
    "Finding",
    "Follower",
    "GcReport",
    "PayloadFile",
    "PayloadKind",
    "RetryPolicy",
    "VerifyReport",
    "collect_garbage",
    "find_corruption",
    "verify_chain",
]
