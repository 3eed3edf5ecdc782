"""Files an operator names (trust root, signing key, --key, --anchor) never hang or exhaust memory.

A FIFO used to block the command forever (``open`` waits for a writer), ``/dev/zero`` as
ML8S_SIGNING_KEY_FILE or an --anchor of ``ml8s audit`` read until memory ran out. Each is now one
ConfigError naming the setting and the path. A symbolic link to a regular file (how Kubernetes mounts a
secret) is still followed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forked_cli import forked_ml8s

from ml8s.audit.anchor_tags import load_anchor
from ml8s.chain import SigningKey
from ml8s.chain.root import load_root
from ml8s.cli.follow import anchor_file
from ml8s.errors import ConfigError
from ml8s.identity.settings import PlatformSettings
from ml8s.store.operator_files import read_operator_file


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, words the error must hold)."""
    os.mkfifo(tmp_path / "fifo")
    big = tmp_path / "big"
    with open(big, "wb") as handle:  # sparse: 4 GiB on no disk
        handle.truncate(4 * 1024**3)
    (tmp_path / "dir").mkdir()
    return {
        "fifo": (str(tmp_path / "fifo"), "a FIFO, not read"),
        "zero": ("/dev/zero", "a character device, not read"),
        "big": (str(big), "over "),
        "dir": (str(tmp_path / "dir"), "a directory, not read"),
        "missing": (str(tmp_path / "missing"), "No such file or directory"),
    }


READERS = {
    "CHAIN_TRUST_ROOT": lambda path: load_root(path),
    "ML8S_SIGNING_KEY_FILE": lambda path: SigningKey.from_env({"ML8S_SIGNING_KEY_FILE": path}),
    "--anchor (follow)": lambda path: anchor_file(path),
    "--anchor (audit)": lambda path: load_anchor(path, PlatformSettings.load({}, {})),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_no_operator_file_hangs_or_reads_without_bound(reader: str, bad: dict[str, tuple[str, str]]) -> None:
    for name, (path, words) in sorted(bad.items()):
        with pytest.raises(ConfigError) as caught:
            READERS[reader](path)
        message = str(caught.value)
        assert path in message and words in message and "expected" in message, (name, message)


def test_a_link_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    key = SigningKey.generate()
    (tmp_path / "key.pem").write_bytes(key.private_pem())
    (tmp_path / "mounted").symlink_to(tmp_path / "key.pem")
    loaded = SigningKey.from_env({"ML8S_SIGNING_KEY_FILE": str(tmp_path / "mounted")})
    assert loaded is not None and loaded.key_id == key.key_id
    data = read_operator_file(str(tmp_path / "mounted"), setting="S", expected="x", max_bytes=10_000)
    assert data == key.private_pem()


def test_exactly_the_bound_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_operator_file(str(path), setting="S", expected="x", max_bytes=100) == b"x" * 100
    with pytest.raises(ConfigError, match="over 99 bytes"):
        read_operator_file(str(path), setting="S", expected="x", max_bytes=99)


def test_the_cli_with_a_fifo_trust_root_is_one_line_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    env = {**os.environ, "HOME": str(tmp_path), "CHAIN_TRUST_ROOT": str(tmp_path / "fifo")}
    done = forked_ml8s(["chain", "init", "--root", str(tmp_path / "root")], env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ml8s: CONFIG_ERROR: CHAIN_TRUST_ROOT={tmp_path / 'fifo'}: a FIFO, not read; expected a trust root file"
    ]


def test_a_payload_that_is_no_regular_file_is_refused_before_any_read(bad: dict[str, tuple[str, str]]) -> None:
    # `ml8s chain commit --payload FIFO` waited for a writer forever.
    from ml8s.chain.safetensors_check import check_safetensors

    for name, (path, words) in sorted(bad.items()):
        if name == "big":
            words = "does not fit"  # a regular file: its header length is checked instead
        with pytest.raises(ConfigError) as caught:
            check_safetensors(path)
        message = str(caught.value)
        assert f"--payload {path}" in message and words in message and "safetensors" in message, (name, message)


def test_a_followers_state_files_that_are_fifos_are_refused_not_waited_on(tmp_path: Path) -> None:
    # `ml8s follow --out DIR` with a FIFO at DIR/.follower-state.json hung before its first poll.
    from ml8s.chain import ChainStore, Follower, PromotionReader
    from ml8s.store import LocalStore

    chain = ChainStore(LocalStore(str(tmp_path / "root")), "c")
    state = tmp_path / "state.json"
    os.mkfifo(state)
    with pytest.raises(ConfigError, match="a FIFO, not read; expected a saved head"):
        Follower(chain, state_path=str(state))
    os.unlink(state)
    os.mkfifo(f"{state}.promotion.json")
    with pytest.raises(ConfigError, match="is no promotion state of a follower"):
        PromotionReader(chain, state_path=str(state))
