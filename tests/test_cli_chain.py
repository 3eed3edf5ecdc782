"""``ml8s chain …`` from a shell: init, external commit, log, show, verify (0 / 1 naming the version), gc."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from forked_cli import forked_ml8s
from safetensors.numpy import save_file


def chain(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"}
    env["PIPELINE_ROOT_URI"] = str(root)
    return forked_ml8s(["chain", *args, "--chain", "line"], env)


def test_chain_cli_end_to_end(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert json.loads(chain(root, "init").stdout)["counter"] == 0
    checkpoint = tmp_path / "w.safetensors"
    save_file({"layer.weight": np.ones((3, 4), dtype=np.float32)}, str(checkpoint))
    first = chain(root, "commit", "--payload", str(checkpoint), "--steps", "7")
    assert first.returncode == 0, first.stderr
    v1 = json.loads(first.stdout)
    assert (v1["counter"], v1["semver"], v1["global_step"]) == (1, "1.0.0", 7)
    again = json.loads(chain(root, "commit", "--payload", str(checkpoint)).stdout)
    assert again["block_hash"] == v1["block_hash"]  # the same checkpoint is never committed twice
    save_file({"layer.weight": np.ones((3, 5), dtype=np.float32)}, str(checkpoint))
    v2 = json.loads(chain(root, "commit", "--payload", str(checkpoint)).stdout)
    assert (v2["counter"], v2["semver"], v2["parent_block_hash"]) == (2, "1.1.0", v1["block_hash"])
    assert "v2" in chain(root, "log").stdout
    assert json.loads(chain(root, "show", "1").stdout)["header"]["parameter_count"] == 12

    ok = chain(root, "verify", "--known-head", v1["block_hash"])
    assert ok.returncode == 0 and ok.stdout.startswith("PASS"), ok.stdout + ok.stderr
    assert json.loads(chain(root, "gc").stdout)["dry_run"] is True

    payload = root / "ml8s_chain/line/versions" / v1["version_dir"] / "payload/model_native.safetensors"
    data = bytearray(payload.read_bytes())
    data[-1] ^= 0xFF
    payload.write_bytes(bytes(data))
    bad = chain(root, "verify")
    assert bad.returncode == 1
    assert bad.stdout.startswith("FAIL") and "version 1" in bad.stdout, bad.stdout


def test_chain_cli_rejects_a_non_safetensors_payload(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a checkpoint")
    proc = chain(tmp_path / "root", "commit", "--payload", str(junk))
    assert proc.returncode == 1
    assert proc.stderr.startswith("ml8s: CONFIG_ERROR") and "safetensors" in proc.stderr


def test_chain_cli_signed(tmp_path: Path) -> None:
    """keygen, trust (adopt a policy), then commits need ML8S_SIGNING_KEY_FILE; verify passes signed."""
    root, key = tmp_path / "root", tmp_path / "committer.pem"
    generated = json.loads(chain(root, "keygen", "--out", str(key)).stdout)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert chain(root, "init").returncode == 0
    os.environ["ML8S_SIGNING_KEY_FILE"] = str(key)
    try:
        adopted = chain(root, "trust", "--public-key", generated["public_key"])
        assert adopted.returncode == 0, adopted.stderr
        checkpoint = tmp_path / "w.safetensors"
        save_file({"layer.weight": np.ones((3, 4), dtype=np.float32)}, str(checkpoint))
        assert chain(root, "commit", "--payload", str(checkpoint)).returncode == 0
    finally:
        del os.environ["ML8S_SIGNING_KEY_FILE"]
    save_file({"layer.weight": np.zeros((3, 4), dtype=np.float32)}, str(checkpoint))
    unsigned = chain(root, "commit", "--payload", str(checkpoint))
    assert unsigned.returncode == 1 and "CHAIN_SIGNING_REQUIRED" in unsigned.stderr, unsigned.stderr
    ok = chain(root, "verify")
    assert ok.returncode == 0 and "no trust policy" not in ok.stderr, ok.stdout + ok.stderr


def test_verify_and_gc_on_a_root_without_the_chain_say_so_in_one_line(tmp_path: Path) -> None:
    """A chain that was never created (a mistyped CHAIN_NAME, an empty root) is a named failure, no traceback."""
    (tmp_path / "root").mkdir()
    verify = chain(tmp_path / "root", "verify")
    assert verify.returncode == 1 and "Traceback" not in verify.stderr, verify.stderr
    assert verify.stdout.startswith("FAIL chain ") and "chain.json does not exist" in verify.stdout, verify.stdout
    assert "None" not in verify.stdout + verify.stderr
    gc = chain(tmp_path / "root", "gc")
    assert gc.returncode != 0 and gc.stdout == "" and "Traceback" not in gc.stderr, gc.stderr
    (line,) = gc.stderr.strip().splitlines()
    assert line.startswith("ml8s: CHAIN_VERSION_NOT_FOUND") and "is not initialized (no chain.json)" in line, line
    reproduce = chain(tmp_path / "root", "reproduce", "--from", "0")
    assert reproduce.returncode == 1 and "is not initialized (no chain.json)" in reproduce.stderr, reproduce.stderr


def test_a_tensorboard_host_that_is_not_utf8_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its lone surrogates failed inside socket (INTERNAL_ERROR TypeError 'encoding of hostname failed')."""
    from ml8s.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["chain", "tensorboard", "--root", str(tmp_path), "--serve", "--host", "local\udcff"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --host" in err and "not UTF-8" in err and "INTERNAL_ERROR" not in err


def test_chain_log_lists_the_other_chains_when_one_head_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ml8s chain log` with no chain named listed nothing at all when one chain's chain.json did not read: one
    broken chain hid every other. Now the others are listed and the broken one named on stderr, exit 1."""
    from ml8s.chain import ChainStore, paths
    from ml8s.cli.chain_views import list_chains
    from ml8s.store import LocalStore

    store = LocalStore(str(tmp_path))
    for name in ("alpha", "broken", "gamma"):
        ChainStore(store, name).init()
    (tmp_path / paths.ROOT / "broken" / paths.HEAD).write_text('{"x": 1}')
    for as_json in (False, True):
        assert list_chains(store, as_json=as_json) == 1
        out, err = capsys.readouterr()
        rows = out.splitlines()[1:]
        listed = [e["chain"] for e in json.loads(out)] if as_json else [line.split()[0] for line in rows]
        assert listed == ["alpha", "gamma"], out
        assert "CHAIN_CORRUPTION" in err and "ml8s_chain/broken/chain.json" in err, err


def test_verify_and_gc_show_a_planted_name_escaped(tmp_path: Path) -> None:
    """A FIFO under the chain named with an escape sequence (a store writer chooses names): verify's FAIL lines
    and GC's refusal printed it raw, so it reached the terminal."""
    from ml8s.chain import ChainStore, paths
    from ml8s.store import LocalStore

    root = tmp_path / "root"
    ChainStore(LocalStore(str(root)), "line").init()
    (root / paths.ROOT / "line" / paths.TMP).mkdir()
    os.mkfifo(root / paths.ROOT / "line" / paths.TMP / "x\x1b[2J\ny")
    for verb, code in (("verify", 1), ("gc", 1)):
        done = chain(root, verb)
        out = done.stdout + done.stderr
        assert done.returncode == code and "\x1b" not in out, out
        assert all(line.startswith(("FAIL chain", "  ", "ml8s: ")) for line in out.splitlines()), out  # none forged
        assert "x\\x1b[2J\\ny" in out, out
