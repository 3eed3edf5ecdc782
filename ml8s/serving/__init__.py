"""Serving a model chain: publish weights as FULL/DELTA versions, follow them, predict (SPEC §8).

- Producer: ``DeltaProducer.publish`` / ``publish_full`` / ``publish_delta`` (async; ``publish_sync``).
- Consumer: ``DeltaConsumer.discover_latest`` / ``get_checkpoint`` / ``apply_delta_in_place`` (async,
  the blocking work in a thread pool; ``*_sync`` variants block).
- ``InferenceClient``: pinned or tracking, verified at every hop, swapped atomically, ``predict`` on raw rows.
- ``ModelDirectory`` / ``follow``: a local directory holding the current verified version (``ml8s follow``).

One implementation for every store (local, S3, radosgw), through ``ml8s.chain``; see docs/serving.md.
"""

from ml8s.serving.client import ClientConfig, ClientMode, InferenceClient, SwapStats
from ml8s.serving.consumer import DeltaConsumer
from ml8s.serving.directory import ModelDirectory
from ml8s.serving.follow import FollowOptions, follow
from ml8s.serving.producer import DeltaProducer, PublishResult
from ml8s.serving.served import PREDICT_FILES, Served, ServedVersion, build_served

__all__ = [
    "PREDICT_FILES",
    "ClientConfig",
    "ClientMode",
    "DeltaConsumer",
    "DeltaProducer",
    "FollowOptions",
    "InferenceClient",
    "ModelDirectory",
    "PublishResult",
    "Served",
    "ServedVersion",
    "SwapStats",
    "build_served",
    "follow",
]
