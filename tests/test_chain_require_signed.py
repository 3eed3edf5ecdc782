"""CHAIN_REQUIRE_SIGNED (issue 12): unsigned chains and versions never pass silently where signatures are
required: verify names them (``unsigned``), the follower and the trusted reader refuse them, the CLI's
default follows the setting, and a run without a signing key refuses to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked_cli import forked_ml8s
from test_chain_signing import KEY_A, KEY_B, ROOT, ROOT_KEY, intruder
from test_chain_support import CHAIN, meta, payload

from ml8s.chain import ChainStore, Follower, ReadTrust, TrustedReader, adopt_policy, paths, root_json, verify_chain
from ml8s.errors import ConfigError, SigningRequiredError, UntrustedVersionError
from ml8s.identity.settings import PlatformSettings
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.chain_commit import require_signing_key
from ml8s.store import LocalStore


def _legacy(root: Path, versions: int = 2) -> ChainStore:
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    chain.init()
    for i in range(1, versions + 1):
        chain.commit(payload(f"legacy{i}"), meta(f"legacy{i}"))
    return chain


def test_unsigned_chain_is_a_finding_only_when_required(tmp_path: Path) -> None:
    chain = _legacy(tmp_path)
    assert verify_chain(chain).ok
    report = verify_chain(chain, require_signed=True, root=ROOT)
    assert [(f.check, f.counter) for f in report.findings] == [("unsigned", None)]
    assert "CHAIN_REQUIRE_SIGNED" in report.findings[0].reason
    unpinned = verify_chain(chain, require_signed=True)  # without a pinned root: trust on first use, refused
    assert [f.check for f in unpinned.findings] == ["trust_root_missing"]


def test_versions_before_the_first_policy_are_unsigned(tmp_path: Path) -> None:
    chain = _legacy(tmp_path)
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    ChainStore(chain.store, CHAIN, signer=KEY_A).commit(payload("signed"), meta("signed"))
    assert verify_chain(chain).ok
    [finding] = verify_chain(ChainStore(chain.store, CHAIN), require_signed=True, root=ROOT).findings
    assert (finding.check, finding.counter) == ("unsigned", 1) and "versions 1 to 2 (2)" in finding.reason


def test_chain_signed_from_its_first_version_passes(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_A)
    chain.init()
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    chain.commit(payload("p1"), meta("p1"))
    report = verify_chain(ChainStore(chain.store, CHAIN), require_signed=True, root=ROOT)
    assert report.ok, report.findings
    reader = TrustedReader(chain, trust=ReadTrust(root=ROOT, require_signed=True))
    assert reader.fetch_payload(chain.head(), "model.bin") == payload("p1")["model.bin"]


def test_follower_and_reader_refuse_an_unsigned_chain(tmp_path: Path) -> None:
    chain = _legacy(tmp_path)
    assert Follower(ChainStore(chain.store, CHAIN)).poll() == chain.head()  # not required: followed
    follower = Follower(ChainStore(chain.store, CHAIN), trust=ReadTrust(root=ROOT, require_signed=True))
    with pytest.raises(UntrustedVersionError) as refused:
        follower.poll()
    assert refused.value.check == "unsigned" and follower.last is None and follower.current is None
    required = ReadTrust(root=ROOT, require_signed=True)
    with pytest.raises(UntrustedVersionError, match="unsigned"):
        TrustedReader(chain, trust=required).head()
    with pytest.raises(UntrustedVersionError, match="unsigned"):
        TrustedReader(chain, trust=required).fetch_payload(chain.head(), "model.bin")
    with pytest.raises(UntrustedVersionError) as unpinned:  # no root: trust on first use is refused too
        Follower(ChainStore(chain.store, CHAIN), require_signed=True).poll()
    assert unpinned.value.check == "trust_root_missing"


def test_reader_refuses_a_version_by_a_key_outside_the_policy(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_A)
    chain.init()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    good = chain.commit(payload("p1"), meta("p1"))
    forged = intruder(chain, "evil", signer=KEY_B, policy=1)
    reader = TrustedReader(ChainStore(chain.store, CHAIN))
    assert reader.fetch_payload(good, "model.bin") == payload("p1")["model.bin"]
    with pytest.raises(UntrustedVersionError) as refused:
        reader.fetch_payload(forged, "model.bin")
    assert (refused.value.check, refused.value.version) == ("untrusted_key", forged.counter)


def test_setting_parses_and_defaults_to_false() -> None:
    assert PlatformSettings.load({}).chain_require_signed is False
    assert PlatformSettings.load({"CHAIN_REQUIRE_SIGNED": "true"}).chain_require_signed is True
    with pytest.raises(ConfigError, match=r"CHAIN_REQUIRE_SIGNED='maybe' is invalid"):
        PlatformSettings.load({"CHAIN_REQUIRE_SIGNED": "maybe"})


def test_run_without_a_key_refuses_at_bootstrap(small_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {"DATA_ROOT": str(small_data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root)}
    with pytest.raises(SigningRequiredError, match="CHAIN_REQUIRE_SIGNED=true"):
        bootstrap({**env, "CHAIN_REQUIRE_SIGNED": "true"})
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))  # nothing written
    settings = PlatformSettings.load({"CHAIN_REQUIRE_SIGNED": "true"})
    key = KEY_A.private_pem().decode()
    assert require_signing_key(settings, {"ML8S_SIGNING_KEY": key}) is not None
    assert require_signing_key(PlatformSettings.load({}), {}) is None


def _verify(root: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    unset = ("CHAIN_NAME", "CHAIN_REQUIRE_SIGNED", "CHAIN_TRUST_ROOT")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    command = [str(Path(sys.executable).with_name("ml8s")), "chain", "verify", "--root", str(root), "--chain", CHAIN]
    return forked_ml8s([*command[1:], *flags], {**base, **env})


def test_cli_default_follows_the_setting_and_flags_override_it(tmp_path: Path) -> None:
    _legacy(tmp_path)
    passed = _verify(tmp_path)
    assert passed.returncode == 0 and "not checked: authenticity" in passed.stderr
    required = _verify(tmp_path, "--json", CHAIN_REQUIRE_SIGNED="true")
    assert required.returncode == 1
    assert [f["check"] for f in json.loads(required.stdout)["findings"]] == ["trust_root_missing"]
    (tmp_path / "root.json").write_bytes(root_json(ROOT))
    pinned = _verify(tmp_path, "--json", CHAIN_REQUIRE_SIGNED="true", CHAIN_TRUST_ROOT=str(tmp_path / "root.json"))
    assert [f["check"] for f in json.loads(pinned.stdout)["findings"]] == ["unsigned"]
    assert _verify(tmp_path, "--allow-unsigned", CHAIN_REQUIRE_SIGNED="true").returncode == 0
    flagged = _verify(tmp_path, "--require-signed")
    assert flagged.returncode == 1 and "trust_root_missing" in flagged.stdout
    assert (tmp_path / paths.ROOT / CHAIN / paths.HEAD).exists()
