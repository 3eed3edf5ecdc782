"""The one root-URI parser: hand-written normalizations (SPEC §2 step 1) and every malformed root refused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from forked_cli import ML8S, forked_ml8s

from ml8s.context.run import RunContext
from ml8s.errors import ConfigError, RootUriError
from ml8s.identity.params import validate_params
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import RootUri, parse_root_uri
from ml8s.identity.variables import canonical_config
from ml8s.store import open_store


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/data/x", RootUri(scheme="file", bucket="", path="/data/x", uri="file:///data/x")),
        ("  /data/x/\n", RootUri(scheme="file", bucket="", path="/data/x", uri="file:///data/x")),
        ("/data//x/./y/..", RootUri(scheme="file", bucket="", path="/data/x", uri="file:///data/x")),
        ("file:///data/./y/../x/", RootUri(scheme="file", bucket="", path="/data/x", uri="file:///data/x")),
        ("/", RootUri(scheme="file", bucket="", path="/", uri="file:///")),
        ("file:///", RootUri(scheme="file", bucket="", path="/", uri="file:///")),
        ("/srv/a b/é", RootUri(scheme="file", bucket="", path="/srv/a b/é", uri="file:///srv/a b/é")),
        ("s3://bucket", RootUri(scheme="s3", bucket="bucket", path="", uri="s3://bucket")),
        ("s3://bucket/", RootUri(scheme="s3", bucket="bucket", path="", uri="s3://bucket")),
        ("s3://bucket/prefix//", RootUri(scheme="s3", bucket="bucket", path="prefix", uri="s3://bucket/prefix")),
        (
            " s3://my.bucket-01/a/b.c/d-e/ ",
            RootUri(scheme="s3", bucket="my.bucket-01", path="a/b.c/d-e", uri="s3://my.bucket-01/a/b.c/d-e"),
        ),
        ("s3://abc/k:v/x", RootUri(scheme="s3", bucket="abc", path="k:v/x", uri="s3://abc/k:v/x")),
    ],
)
def test_valid_roots_normalize(text: str, expected: RootUri) -> None:
    parsed = parse_root_uri(text, variable="DATA_ROOT")
    assert parsed == expected
    assert parse_root_uri(parsed.uri, variable="DATA_ROOT") == parsed  # normalizing twice changes nothing


def test_a_file_uri_on_localhost_is_its_absolute_path() -> None:
    for text in ("file://localhost/data/x", "file://LocalHost/data/./x/"):
        assert parse_root_uri(text, variable="DATA_ROOT") == parse_root_uri("/data/x", variable="DATA_ROOT")


def test_every_root_setting_refuses_a_file_uri_with_a_host() -> None:
    for variable in ("PIPELINE_ROOT_URI", "WARM_START_ROOT_URI"):
        with pytest.raises(RootUriError, match=rf"^CONFIG_ERROR: {variable}='file://data/x' names the host 'data'"):
            PlatformSettings.load({variable: "file://data/x"})
    with pytest.raises(RootUriError, match=r"^CONFIG_ERROR: DATA_ROOT='file://otherhost/d' names the host"):
        canonical_config({"DATA_ROOT": "file://otherhost/d", "TARGET_COLUMN": "y"})
    with pytest.raises(RootUriError, match=r"^CONFIG_ERROR: --root='file://u@h/x' names a host with credentials \(not"):
        parse_root_uri("file://u:secret@h/x", variable="--root")


def test_the_store_refuses_a_file_uri_with_a_host() -> None:
    with pytest.raises(ConfigError, match=r"unsupported store URI 'file://data/x'; expected file:///path"):
        open_store("file://data/x")


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    here = os.getcwd()
    assert parse_root_uri("data/", variable="PIPELINE_ROOT_URI").uri == f"file://{here}/data"
    assert parse_root_uri("./a/../data", variable="PIPELINE_ROOT_URI").uri == f"file://{here}/data"
    # A colon without a slash after it is a file name, not a scheme: such paths always were valid.
    assert parse_root_uri("v2:data", variable="PIPELINE_ROOT_URI").uri == f"file://{here}/v2:data"


# (text, a phrase the message must hold besides the variable and the text)
MALFORMED = [
    ("", "is empty; expected a local path, file:// or s3://"),
    ("   ", "is empty"),
    ("s3:/x", "is not an S3 URI; expected s3://BUCKET/PREFIX (two slashes after s3:)"),
    ("s3:x", "is not an S3 URI"),
    ("s3:", "is not an S3 URI"),
    ("s3://", "names no bucket"),
    ("s3:///prefix", "names no bucket"),
    ("s3://Bucket/x", "invalid bucket 'Bucket'"),
    ("s3://my_bucket", "invalid bucket 'my_bucket'"),
    ("s3://ab", "invalid bucket 'ab'"),
    ("s3://" + "a" * 64, "invalid bucket"),
    ("s3://-bucket", "invalid bucket '-bucket'"),
    ("s3://bucket-/x", "invalid bucket 'bucket-'"),
    ("s3://a..b", "invalid bucket 'a..b'"),
    ("s3://192.168.1.1/x", "invalid bucket '192.168.1.1'"),
    ("s3://xn--bucket", "invalid bucket 'xn--bucket'"),
    ("s3://bucket-s3alias", "invalid bucket"),
    ("s3://bucket\n/x", "invalid bucket 'bucket\\n'"),  # '$' matched before the newline: accepted, hashed, sent
    ("s3://bucket//a", "empty, '.' or '..' segment"),
    ("s3://bucket/a//b", "empty, '.' or '..' segment"),
    ("s3://bucket/./a", "empty, '.' or '..' segment"),
    ("s3://bucket/a/..", "empty, '.' or '..' segment"),
    ("s3://bucket/a/../b/", "empty, '.' or '..' segment"),
    ("file:relative", "is not a file URI; expected file:// followed by a path, or a bare path"),
    ("file:/x", "is not a file URI"),
    ("File:/x", "is not a file URI"),
    ("file:", "is not a file URI"),
    ("file://", "names no path"),
    ("~", "expected an absolute or relative path; ~ is not expanded"),
    ("~/data", "expected an absolute or relative path; ~ is not expanded"),
    ("~alice/data", "~ is not expanded"),
    ("file://~/data", "~ is not expanded"),
    # a file URI's host was dropped: read as ./otherhost/data and ./data/x, directories the URI never named
    ("file://otherhost/data", "names the host 'otherhost'; expected file:///ABSOLUTE/PATH (three slashes"),
    ("file://data/x", "names the host 'data'"),
    ("file://data", "names the host 'data'"),
    ("file://localhost", "names no path"),
    ("gs://bucket", "has an unsupported scheme; expected a local path, file:// or s3://"),
    ("http://host/x", "has an unsupported scheme"),
    ("ftp://x", "has an unsupported scheme"),
    ("S3://bucket", "has an unsupported scheme"),
    ("FILE:///x", "has an unsupported scheme"),
    ("hdfs:/x", "has an unsupported scheme"),
    ("/data/a\x00b", "holds a NUL character; expected a path or S3 URI without one"),
    ("file:///data\x00", "holds a NUL character"),
    ("s3://bucket/a\x00b", "holds a NUL character"),
]


@pytest.mark.parametrize(("text", "phrase"), MALFORMED)
@pytest.mark.parametrize("variable", ["DATA_ROOT", "PIPELINE_ROOT_URI"])
def test_malformed_roots_name_the_variable(text: str, phrase: str, variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_root_uri(text, variable=variable)
    message = str(caught.value)
    assert message.startswith(f"CONFIG_ERROR: {variable}={text!r} ")
    assert phrase in message
    assert isinstance(caught.value, RootUriError) and caught.value.code == "CONFIG_ERROR"


def test_data_root_goes_through_the_parser() -> None:
    with pytest.raises(ConfigError, match=r"DATA_ROOT='s3:/data' is not an S3 URI"):
        canonical_config({"DATA_ROOT": "s3:/data", "TARGET_COLUMN": "y"})
    config = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y"})
    assert validate_params(config).data_root == "file:///d"
    with pytest.raises(ConfigError, match=r"DATA_ROOT='s3://bucket/a/\.\./b'"):
        validate_params({**config, "data_root": "s3://bucket/a/../b"})


def test_every_spelling_of_one_folder_gives_one_run_id_and_one_set_of_paths(tmp_path: Path) -> None:
    """POSIX lets exactly two leading slashes mean something else, so os.path.normpath keeps them: DATA_ROOT=//data
    was file:////data, another config hash and RUN_ID than /data for the same files, and PIPELINE_ROOT_URI=//root
    another spelling of every artifact's URI. Every spelling of a folder is now its one canonical path; the
    canonical spelling's RUN_ID is the one it always had (the config hash of file:///...)."""
    from conftest import write_small_churn

    from ml8s.pipeline.bootstrap import bootstrap

    def run(data_root: str, pipeline_root: str) -> RunContext:  # as given: a Path would fold the slashes
        return bootstrap({"DATA_ROOT": data_root, "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": pipeline_root})

    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"
    canonical = run(str(data), str(root))
    assert canonical.spec.params.data_root == f"file://{data}" and canonical.settings.pipeline_root_uri == (
        f"file://{root}"
    )
    for spelled_data, spelled_root in (
        (f"/{data}", f"/{root}"),  # //tmp/...
        (f"file:///{data}", f"file:///{root}"),  # file:////tmp/...
        (f"file://localhost/{data}/", f"file://localhost/{root}/"),
        (f"/{data}/./", f"/{root}//."),
        (f"{data.parent}//{data.name}/", f"{root.parent}/./{root.name}"),
        (f"///{data}", f"///{root}"),
    ):
        for text, canonical_uri in ((spelled_data, f"file://{data}"), (spelled_root, f"file://{root}")):
            assert parse_root_uri(text, variable="DATA_ROOT").uri == canonical_uri, text
        spelled = run(spelled_data, spelled_root)
        assert spelled.run_id == canonical.run_id, spelled_data
        assert spelled.spec == canonical.spec, spelled_data  # the hashes, the fingerprint's root: the cache key
        assert spelled.settings.pipeline_root_uri == canonical.settings.pipeline_root_uri, spelled_root
        assert spelled.key("x") == canonical.key("x")


def test_cli_root_flag_is_a_config_error_naming_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_ROOT_URI"}
    cases = {
        "gs://bucket": "ml8s: CONFIG_ERROR: --root='gs://bucket' has an unsupported scheme; expected a local path, "
        "file:// or s3://",
        "s3:/x": "ml8s: CONFIG_ERROR: --root='s3:/x' is not an S3 URI; expected s3://BUCKET/PREFIX (two slashes "
        "after s3:)",
    }
    for root, line in cases.items():
        done = forked_ml8s(["runs", "list", "--root", root], env)
        assert done.returncode == 1 and done.stderr == line + "\n", done.stderr
    env["PIPELINE_ROOT_URI"] = "~/runs"  # the environment's root is parsed only when --root is absent
    assert subprocess.run([ML8S, "runs", "list", "--root", str(tmp_path)], env=env).returncode == 0
    done = forked_ml8s(["runs", "list"], env)
    assert done.returncode == 1 and done.stderr.startswith("ml8s: CONFIG_ERROR: PIPELINE_ROOT_URI='~/runs' starts")


@pytest.mark.parametrize("name", ["data_root", "pipeline_root_uri"])
def test_a_nul_in_a_root_input_is_a_config_error_naming_the_input(name: str, tmp_path: Path) -> None:
    """A workflow input (an inputs file's "\\u0000", the console) can carry a NUL that no environment variable or
    argument can: os.stat raised ValueError ("embedded null byte"), a traceback from the bootstrap task."""
    from ml8s.pipeline.bootstrap import bootstrap

    env = {"DATA_ROOT": str(tmp_path / "data.csv"), "TARGET_COLUMN": "y", "PIPELINE_ROOT_URI": str(tmp_path / "root")}
    with pytest.raises(ConfigError, match=rf"holds a NUL character.*\(explicit input {name}\)"):
        bootstrap(env, {name: str(tmp_path / "x\x00")})
