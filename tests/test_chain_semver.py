"""Semantic version bumps: major on architecture, minor on parameter count, patch otherwise."""

from __future__ import annotations

from test_chain_support import (  # noqa: F401  (fixtures)
    build,
    chain_fixture,
    local_root_fixture,
    meta,
    payload,
)

from ml8s.chain import ChainStore


def test_bumps_along_a_chain(chain: ChainStore) -> None:
    chain.init()
    seen = []
    for i, (arch, params) in enumerate(
        [("a", 10), ("a", 10), ("a", 10), ("a", 10), ("a", 10), ("a", 10), ("b", 10), ("b", 12), ("b", 12), ("c", 99)]
    ):
        seen.append(chain.commit(payload(f"s{i}"), meta(f"s{i}", arch=arch, params=params)).semver)
    assert chain.get(0).semver == "0.0.0"
    assert seen == ["1.0.0", "1.0.1", "1.0.2", "1.0.3", "1.0.4", "1.0.5", "2.0.0", "2.1.0", "2.1.1", "3.0.0"]


def test_semver_is_in_the_directory_name(chain: ChainStore) -> None:
    versions = build(chain, 2)
    assert [v.version_dir[:18] for v in versions] == ["v0000000000_0.0.0_", "v0000000001_1.0.0_", "v0000000002_1.0.1_"]
