"""Follower: track a chain's head and refuse any head that does not extend the last one seen.

An inference node (or an auditor) polls the head; a head that moved must descend from the head it
saw before, proved by walking parent hashes back to it, and every version new to the follower must
be signed as the chain's trust policy requires (ChainCorruptionError naming ``unsigned``,
``untrusted_key``, ...). A head with a lower counter is a rollback (ChainRollbackError), a
different block at or below the last counter is a fork (ChainForkError):
either means the chain's history was rewritten, and the follower keeps serving what it had.

The last head seen is kept in memory and, with ``state_path``, in a small JSON file (written by
rename, so a crash leaves the old or the new state), so a restarted node still refuses a rollback.

Example::

    follower = Follower(ChainStore(store, "churn-model"), state_path="/var/lib/ml8s/churn.head.json")
    if (new := follower.poll()) is not None:
        swap_model(chain.fetch_payload(new, "model.onnx"))
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.chain import trust
from ml8s.chain.anchor import Anchor
from ml8s.chain.models import ChainVersion
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainCorruptionError, ChainForkError, ChainRollbackError, ConfigError


class SeenHead(BaseModel):
    """The last head a follower accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    counter: int
    block_hash: str


class Follower:
    """Follows ``chain``'s head (tracking mode); ``last`` is the head it accepted most recently."""

    def __init__(self, chain: ChainVersions, *, state_path: str | None = None, anchor: Anchor | None = None) -> None:
        """``anchor``: where a follower with no state yet starts (a signed checkpoint kept outside the store),
        so even its first poll refuses a head that does not extend the anchored one."""
        self.chain, self.state_path = chain, state_path
        self.last: SeenHead | None = None
        if anchor is not None:
            point = anchor.checkpoint
            self.last = SeenHead(chain_name=point.chain_name, counter=point.counter, block_hash=point.block_hash)
        if state_path and os.path.exists(state_path):
            with open(state_path, "rb") as handle:
                try:
                    saved = SeenHead.model_validate_json(handle.read())
                except ValidationError as exc:
                    raise ConfigError(f"{state_path} is no follower state; expected a saved head") from exc
            if self.last is None or saved.counter >= self.last.counter:  # the newer of state and anchor
                self.last = saved
        if self.last is not None and self.last.chain_name != chain.name:
            raise ConfigError(
                f"{state_path or 'the anchor'} follows chain {self.last.chain_name!r}, not {chain.name!r}"
            )

    def poll(self) -> ChainVersion | None:
        """The new head if it moved (and extends the last one), None if unchanged; raises on rollback/fork."""
        head = self.chain.head()
        last = self.last
        if last is not None and head.block_hash == last.block_hash:
            return None
        if last is not None:
            self._check_extends(head, last)
        self._check_signed(head, last.counter if last is not None else -1)
        self._remember(head)
        return head

    def _check_signed(self, head: ChainVersion, seen: int) -> None:
        """Every version new to this follower must satisfy the chain's trust policy (trust.py)."""
        policies, problems = trust.load_policies(self.chain)
        if problems:
            raise ChainCorruptionError(None, problems[0][1], check=problems[0][0])
        for version in self.chain.walk(head):
            if version.counter <= seen:
                return
            for check, reason in trust.block_problems(version, policies):
                raise ChainCorruptionError(version.counter, f"{version.version_dir}: {reason}", check=check)

    def _check_extends(self, head: ChainVersion, last: SeenHead) -> None:
        name = self.chain.name
        if head.counter < last.counter:
            raise ChainRollbackError(
                head.counter, f"chain {name!r}: head at {head.counter} after {last.counter} ({last.block_hash})"
            )
        for version in self.chain.walk(head):
            if version.counter == last.counter:
                if version.block_hash != last.block_hash:
                    raise ChainForkError(
                        last.counter,
                        f"chain {name!r}: head {head.version_dir} descends from {version.block_hash} at "
                        f"{last.counter}, not from {last.block_hash} seen before",
                    )
                return

    def _remember(self, head: ChainVersion) -> None:
        self.last = SeenHead(chain_name=self.chain.name, counter=head.counter, block_hash=head.block_hash)
        if self.state_path:
            tmp = f"{self.state_path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(self.last.model_dump_json().encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.state_path)
