"""The parent a warm start trains from: found on the chain at bootstrap (WARM_START: head, a counter or a hash)
and read again by later steps, always through the checked reader every consumer uses (ml8s.chain.trusted).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainStore, ChainVersion, Follower, ReadTrust
from ml8s.errors import ConfigError, LineageError, VersionNotFoundError, WarmStartNotFoundError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.variables import JsonValue
from ml8s.store import open_store

_HEX = re.compile(r"[0-9a-fA-F]{12,64}")


class ParentRef(BaseModel):
    """The version a warm start trains from, and where it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root_uri: str
    chain_name: str
    counter: int
    block_hash: str
    content_hash: str


def parent_version(parent: ParentRef) -> tuple[ChainStore, ChainVersion]:
    """The parent version again (a later step, maybe another process), checked as at bootstrap (trusted.py)
    and to be the one resolved."""
    chain = ChainStore(open_store(parent.root_uri), parent.chain_name)
    try:
        version = reader(chain, ReadTrust.from_settings(PlatformSettings.load())).version(parent.counter)
    except VersionNotFoundError as exc:
        raise WarmStartNotFoundError(f"the parent {parent.chain_name!r} v{parent.counter} is gone: {exc}") from exc
    if version.block_hash != parent.block_hash:
        raise LineageError(
            f"chain {parent.chain_name!r} v{parent.counter} is now block {version.block_hash[:12]}; the run resolved "
            f"block {parent.block_hash[:12]} at bootstrap (the chain was rewritten)"
        )
    return chain, version


def reader(chain: ChainStore, trust: ReadTrust) -> Follower:
    """A follower that polled once: the warm start reads its parent as every reader does (trusted.py)."""
    follower = Follower(chain, trust=trust)
    follower.poll()
    return follower


def find_parent(
    chain: ChainStore, request: JsonValue, trust: ReadTrust
) -> tuple[ChainVersion | None, ChainVersion | None]:
    """The version WARM_START names and the checked head it was found from (None, None: no chain yet)."""
    text = text_of(request)
    counter = isinstance(request, int) and not isinstance(request, bool) and 0 < request < 10**11
    if text != "head" and not counter and not _HEX.fullmatch(text):
        # before the chain is read: a chain not made yet would otherwise be named instead of the typo
        raise ConfigError(
            f"WARM_START={text!r} is invalid; expected empty (cold start), head, a version number >= 1, or a block "
            "or content hash (12 to 64 hex digits)"
        )
    if chain.read_head() is None:
        missing = chain.missing_head()
        if missing is not None:
            raise missing
        if text == "head":
            return None, None  # no chain yet: the lineage's cold start
        raise WarmStartNotFoundError(
            f"WARM_START={text!r}: chain {chain.name!r} at {chain.uri()} has no version yet; expected a version on "
            "it, or WARM_START=head (a cold start on a chain with no model)"
        )
    follower = reader(chain, trust)
    head = follower.current
    if text == "head":
        return (head if head is not None and head.counter > 0 else None), head
    if isinstance(request, int) and counter:
        try:
            # committed since the poll read the head (a run meanwhile): the head is read again, with every check
            version = follower.fresh_version(request)
        except VersionNotFoundError as exc:
            raise WarmStartNotFoundError(f"WARM_START={request}: {exc}") from exc
        return version, follower.current  # the head it was found from: a stale-parent check compares with it
    wanted = text.lower()
    found = [
        v
        for v in chain.walk(head)
        if v.counter > 0 and (v.block_hash.startswith(wanted) or (len(wanted) == 64 and v.content_hash == wanted))
    ]
    if len(found) != 1:
        what = "matches no version" if not found else f"matches {len(found)} versions"
        content = [v.counter for v in chain.walk(head) if v.counter > 0 and v.content_hash.startswith(wanted)]
        hint = (  # 'content 3d65e4ea810f', as chain reproduce prints it
            f" (it begins v{content[0]}'s content hash, which is taken whole: 64 hex digits)"
            if content and not found
            else ""
        )
        raise WarmStartNotFoundError(f"WARM_START={text!r} {what} of chain {chain.name!r}{hint}; expected exactly one")
    return found[0], head


def text_of(value: JsonValue) -> str:
    """A config value as the user wrote it (WARM_START, and the values a warm start must share)."""
    if isinstance(value, list):
        return ",".join(value)
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
