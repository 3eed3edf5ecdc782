"""Identity vectors: canonical JSON, fingerprints and hashes computed by hand with sha256sum."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ml8s.data.fingerprint import FileEntry, ObjectEntry, fingerprint_entries, fingerprint_listing, fingerprint_local
from ml8s.errors import ConfigError, DataError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.variables import canonical_config, canonical_json, raw_values_from_env

DEFAULT_JSON = (
    '{"batch_size":256,"data_root":"file:///data/churn","epochs":10,"exclude_columns":null,'
    '"hidden_layers":2,"hidden_units":64,"learning_rate":0.001,"max_features":null,"model_code":null,'
    '"model_format":"onnx","model_type":"mlp","random_seed":42,"sample_rows":null,'
    '"standardize":true,"target_column":"churned","test_size":0.2,"train_device":"cpu",'
    '"train_world_size":1,"warm_start":null}'
)
# printf '%s' 'a.csv:x:1|b/c.csv:y:2' | sha256sum
TOY_FP = "47fb05818f9daee0b981c840c44e3689b2af41fe06254db5d8e93c184262ad15"
# printf '%s\n%s' "$DEFAULT_JSON" "$TOY_FP" | sha256sum
TOY_FULL = "6892efcbd0b3cecd157208fdaacb9608c753f3a5e1534213aecaf8574797f63b"
# printf '%s\n%s' "$DEFAULT_JSON" '' | sha256sum
NONSTRICT_FULL = "a1d3228fef615cfdafabf35cade844b48b5aad57a2013a9cfd451a87f2df4477"


def test_defaults_fill_every_variable() -> None:
    config = canonical_config({"DATA_ROOT": "/data/churn/", "TARGET_COLUMN": " churned "})
    assert canonical_json(config) == DEFAULT_JSON


def test_explicit_default_strings_equal_unset() -> None:
    explicit = canonical_config(
        {
            "DATA_ROOT": "file:///data/churn",
            "TARGET_COLUMN": "churned",
            "TEST_SIZE": "0.20",
            "STANDARDIZE": "TRUE",
            "LEARNING_RATE": "1e-3",
            "EPOCHS": " 10 ",
            "SAMPLE_ROWS": "  ",
        }
    )
    assert canonical_json(explicit) == DEFAULT_JSON


def test_full_hash_and_run_id() -> None:
    config = canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"})
    identity = compute_identity(config, TOY_FP)
    assert identity.full_config_hash == TOY_FULL
    assert identity.run_id == TOY_FULL[:12]


def test_non_strict_identity_hashes_empty_fingerprint() -> None:
    config = canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"})
    identity = compute_identity(config, TOY_FP, strict=False)
    assert identity.full_config_hash == NONSTRICT_FULL
    assert identity.data_fingerprint == TOY_FP


def test_lists_and_unicode_in_canonical_json() -> None:
    config = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "réponse", "EXCLUDE_COLUMNS": "zip, id,,id , âge"})
    text = canonical_json(config)
    assert '"exclude_columns":["id","zip","âge"]' in text
    assert '"target_column":"réponse"' in text


def test_required_variables() -> None:
    with pytest.raises(ConfigError, match="DATA_ROOT is required"):
        canonical_config({"TARGET_COLUMN": "y"})
    with pytest.raises(ConfigError, match="TARGET_COLUMN is required"):
        canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "   "})


def test_platform_variables_are_ignored() -> None:
    env = {
        "DATA_ROOT": "/data/churn",
        "TARGET_COLUMN": "churned",
        "PIPELINE_ROOT_URI": "s3://x",
        "FORCE_RERUN": "true",
        "MLFLOW_TRACKING_URI": "http://m",
        "STRICT_DATA_IDENTITY": "false",
        "IMAGE_VERSION": "7",
        "AWS_SECRET_ACCESS_KEY": "s",
        "FLYTE_INTERNAL_EXECUTION_ID": "abc",
    }
    assert canonical_json(canonical_config(raw_values_from_env(env))) == DEFAULT_JSON


def test_overrides_win_and_empty_override_takes_env() -> None:
    env = {"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "other"}
    raw = raw_values_from_env(env, {"target_column": "churned", "data_root": ""})
    assert canonical_json(canonical_config(raw)) == DEFAULT_JSON


def _tree(root: Path) -> None:
    (root / "sub" / "dir").mkdir(parents=True)
    (root / "a.csv").write_bytes(b"x,y\n1,2\n")
    (root / ".hidden").write_bytes(b"h")
    (root / "sub" / "dir" / "b.csv").write_bytes(b"b")
    (root / "é.csv").write_bytes("é".encode())


# printf '%s' '.hidden:<sha256 h>:1|a.csv:<sha256>:8|sub/dir/b.csv:<sha256 b>:1|é.csv:<sha256 é>:2' | sha256sum
TREE_FP = "306a8bcc9dcaa63cd4a37ba3f6a354f6fd4e7ae79c9bed6bbdaeba431d04f790"


def test_local_fingerprint_nested_hidden_unicode(tmp_path: Path) -> None:
    _tree(tmp_path)
    fp = fingerprint_local(str(tmp_path))
    assert fp.fingerprint == TREE_FP
    assert [e.relative_path for e in fp.entries] == [".hidden", "a.csv", "sub/dir/b.csv", "é.csv"]


def test_local_fingerprint_follows_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    _tree(real)
    data = tmp_path / "data"
    data.mkdir()
    (data / "sub").mkdir()
    os.symlink(real / "a.csv", data / "a.csv")
    os.symlink(real / "sub" / "dir", data / "sub" / "dir")
    (data / ".hidden").write_bytes(b"h")
    (data / "é.csv").write_bytes("é".encode())
    assert fingerprint_local(str(data)).fingerprint == TREE_FP


def test_local_fingerprint_ignores_creation_order_and_mtime(tmp_path: Path) -> None:
    first, second = tmp_path / "1", tmp_path / "2"
    for root, order in ((first, ["b", "a"]), (second, ["a", "b"])):
        root.mkdir()
        for name in order:
            (root / name).write_bytes(name.encode())
    os.utime(first / "a", (1, 1))
    assert fingerprint_local(str(first)).fingerprint == fingerprint_local(str(second)).fingerprint


def test_empty_and_missing_data(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(DataError, match="holds no files"):
        fingerprint_local(str(tmp_path / "empty"))
    with pytest.raises(DataError, match="does not exist"):
        fingerprint_local(str(tmp_path / "nope"))


def test_symlink_loop_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"1")
    os.symlink(tmp_path, tmp_path / "loop")
    with pytest.raises(DataError, match="symlink loop"):
        fingerprint_local(str(tmp_path))


# printf '%s' 'part-1.csv:<etag1>:1000|part-2.csv:<etag2>-3:20971520' | sha256sum (etags as below)
LISTING_FP = "b427b429f94d1c2a00fa421c00fa7669eb4b34d748e337fdc651290ca3c25bf6"


def test_listing_fingerprint_strips_quotes_keeps_multipart_and_skips_dirs() -> None:
    objects = [
        ObjectEntry(key="churn/part-2.csv", etag='"d41d8cd98f00b204e9800998ecf8427e-3"', size=20971520),
        ObjectEntry(key="churn/", etag='"d41d8cd98f00b204e9800998ecf8427e"', size=0),
        ObjectEntry(key="churn/part-1.csv", etag='"9b2cf535f27731c974343645a3985328"', size=1000),
    ]
    assert fingerprint_listing("s3://b/churn", "churn", objects).fingerprint == LISTING_FP


def test_a_name_with_the_token_separator_is_refused(tmp_path: Path) -> None:
    """A file named 'a.csv:<sha256>:<size>|b.csv' holding b.csv's bytes had the fingerprint of the pair a.csv, b.csv."""
    pair, forged = tmp_path / "pair", tmp_path / "forged"
    pair.mkdir()
    forged.mkdir()
    first, second = b"a,y\n1,0\n", b"a,y\n3,1\n"
    (pair / "a.csv").write_bytes(first)
    (pair / "b.csv").write_bytes(second)
    name = f"a.csv:{hashlib.sha256(first).hexdigest()}:{len(first)}|b.csv"
    (forged / name).write_bytes(second)
    as_listed = FileEntry(relative_path=name, checksum=hashlib.sha256(second).hexdigest(), size=len(second))
    assert fingerprint_entries([as_listed]) == fingerprint_local(str(pair), progress=False).fingerprint
    for root in (forged, forged / name):
        with pytest.raises(DataError, match=r"^DATA_ERROR: DATA_ROOT holds '.*\|b\.csv', a name with '\|'; expected"):
            fingerprint_local(str(root), progress=False)
    with pytest.raises(DataError, match=r"s3://b/churn/x\|y\.csv', a name with '\|'"):
        fingerprint_listing("s3://b/churn", "churn", [ObjectEntry(key="churn/x|y.csv", etag='"e"', size=1)])
    with pytest.raises(DataError, match=r"listed with ETag 'e:1'; expected an ETag without ':' or '\|'"):
        fingerprint_listing("s3://b/churn", "churn", [ObjectEntry(key="churn/a.csv", etag='"e:1"', size=1)])


def test_a_file_appended_to_while_fingerprinted_is_recorded_as_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its token was the new bytes' sha256 with the listed (old) size, a state the file never had."""
    from ml8s.data import fingerprint

    (tmp_path / "a.csv").write_bytes(b"a,y\n1,0\n")
    listed = fingerprint.list_local_files

    def appending(root: str) -> list[tuple[str, str, int]]:
        files = listed(root)
        with open(tmp_path / "a.csv", "ab") as handle:  # a writer appends after the listing, before the hash
            handle.write(b"2,1\n")
        return files

    monkeypatch.setattr(fingerprint, "list_local_files", appending)
    (entry,) = fingerprint_local(str(tmp_path), progress=False).entries
    assert (entry.checksum, entry.size) == (hashlib.sha256(b"a,y\n1,0\n2,1\n").hexdigest(), 12)


def test_a_listing_that_repeats_a_key_is_refused() -> None:
    """A server that listed a key twice (a pagination bug) had its rows read, and counted, twice."""
    twice = [ObjectEntry(key=f"churn/{name}", etag='"e"', size=1) for name in ("a.csv", "b.csv", "a.csv")]
    with pytest.raises(DataError, match=r"^DATA_ERROR: DATA_ROOT s3://b/churn lists the object 'a\.csv' twice"):
        fingerprint_listing("s3://b/churn", "churn", twice)
