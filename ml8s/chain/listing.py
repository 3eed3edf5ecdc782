"""The chains under a pipeline root, and which of them holds a run: how the CLI finds a chain nobody named."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.chain import paths
from ml8s.chain.runindex import committed
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainError
from ml8s.store import Store


class ChainEntry(BaseModel):
    """One chain of ``ml8s chain log`` with no chain named: its name and head."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain: str
    head_counter: int
    head_semver: str
    head_block_hash: str
    uri: str


def chain_names(store: Store) -> list[str]:
    """The names of the chains under the root (those with a head, ``ml8s_chain/{name}/chain.json``), sorted.

    A directory without a head (a chain whose head was lost) is left out: ``chain verify --chain NAME``
    reports that one by name.
    """
    found = set()
    for info in store.list(f"{paths.ROOT}/"):
        parts = info.key.split("/")
        if len(parts) == 3 and parts[2] == paths.HEAD and paths.CHAIN_NAME.fullmatch(parts[1]):
            found.add(parts[1])
    return sorted(found)


def chain_entries(store: Store) -> tuple[list[ChainEntry], list[ChainError]]:
    """Every chain under the root with its head (the head's block checked against its pointer); and the
    errors of those whose head does not read, so that one broken chain hides none of the others."""
    entries, broken = [], []
    for name in chain_names(store):
        chain = ChainVersions(store, name)
        try:
            head = chain.head()
        except ChainError as exc:
            broken.append(exc)
            continue
        entries.append(
            ChainEntry(
                chain=name,
                head_counter=head.counter,
                head_semver=head.semver,
                head_block_hash=head.block_hash,
                uri=chain.uri(),
            )
        )
    return entries, broken


def chains_holding(store: Store, full_config_hash: str) -> list[str]:
    """The chains under the root whose run index records the run (normally one), sorted."""
    return [name for name in chain_names(store) if committed(ChainVersions(store, name), full_config_hash) is not None]
