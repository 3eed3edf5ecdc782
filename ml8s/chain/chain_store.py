"""ChainStore: one model chain on any :class:`ml8s.store.Store` (local and S3 share this code).

The facade over the chain's layers: everything ``ChainVersions`` reads and writes (versions.py), plus
the operations that append (genesis and the commit protocol: commit.py; retries: retry.py). Imports
go one way: this module knows the layers, the layers never know it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ml8s.chain.commit import commit as commit_once
from ml8s.chain.commit import init as init_chain
from ml8s.chain.models import ChainVersion, CommitMeta, PayloadBuilder, PayloadSource
from ml8s.chain.retry import RetryPolicy, commit_with_retry, to_stderr
from ml8s.chain.versions import ChainVersions


class ChainStore(ChainVersions):
    """The chain ``chain_name`` under ``{store root}/ml8s_chain/{chain_name}/``: read it, append to it.

    Example::

        chain = ChainStore(open_store("file:///srv/root"), "churn-model")
        chain.init()
        version = chain.commit_with_retry({"model.onnx": data}, meta, RetryPolicy())
        assert chain.fetch_payload(version, "model.onnx") == data
    """

    def init(self) -> ChainVersion:
        """Create the genesis block (counter 0, no parent) unless the chain exists; returns the head."""
        return init_chain(self)

    def commit(
        self,
        payload: Mapping[str, PayloadSource] | PayloadBuilder,
        meta: CommitMeta,
        expected_parent: str | None = None,
    ) -> ChainVersion:
        """Append one version, once (see commit.py); ConflictError / NotFastForwardError when it lost."""
        return commit_once(self, payload, meta, expected_parent)

    def commit_with_retry(
        self,
        payload: Mapping[str, PayloadSource] | PayloadBuilder,
        meta: CommitMeta,
        policy: RetryPolicy | None = None,
        *,
        notify: Callable[[str], None] = to_stderr,
        expected_parent: str | None = None,
    ) -> ChainVersion:
        """``commit`` with exponential backoff and jitter; the existing version if the run is already in.
        ``notify`` gets a line whenever the store is slow or unreachable (default: stderr); with
        ``expected_parent``, NotFastForwardError as soon as the head is another version."""
        return commit_with_retry(
            self, payload, meta, policy or RetryPolicy(), notify=notify, expected_parent=expected_parent
        )
