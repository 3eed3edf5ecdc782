"""The image recipe: build secrets stay out of every layer, the Dockerfiles' defaults are the cluster's.

Building the images needs podman or docker, so `make test` does not: `make images-smoke` (run by .ci/run)
runs images/check_layers.py on the real images. Here that checker, the build-time helpers and the
Dockerfiles themselves are tested without a container engine: a checker that missed a planted secret
would let a real one through.
"""

from __future__ import annotations

import base64
import datetime
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tar_support import tar_bytes

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"images_{name}", IMAGES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


check_layers = _load("check_layers")
check_pins = _load("check_pins")
index_env = _load("index_env")


def _cert(common_name: str) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A public root (in the public-roots folder and the bundle) and a proxy CA (in the bundle only)."""
    public, proxy = _cert("Public Root CA"), _cert("sandboxing-egress-ca")
    roots = tmp_path_factory.mktemp("mozilla")
    (roots / "Public_Root_CA.crt").write_bytes(_pem(public))
    bundle = tmp_path_factory.mktemp("bundle") / "ca-certificates.crt"
    bundle.write_bytes(_pem(public) + _pem(proxy))
    return {"public": public, "proxy": proxy, "roots": roots, "bundle": bundle}


CLEAN_CONFIG = {
    "config": {"Env": ["PATH=/opt/venv/bin:/usr/bin", "IMAGE_VERSION=dev"], "Labels": {"title": "ml8s-fe"}},
    "history": [
        {"created_by": "/bin/sh -c #(nop) ARG IMAGE_VERSION=dev"},
        {"created_by": "|1 IMAGE_VERSION=dev /bin/sh -c . /mnt/build-env.sh && pip install -c c.txt .[flyte]"},
    ],
}


def _archive(path: Path, layers: list[dict[str, bytes]], config: dict[str, object] = CLEAN_CONFIG) -> Path:
    """A docker-archive as `podman save` writes it: manifest.json, the config, one tar per layer."""
    members = {"config.json": json.dumps(config).encode()}
    names = []
    for i, files in enumerate(layers):
        names.append(f"{i}/layer.tar")
        members[names[-1]] = tar_bytes(files)
    members["manifest.json"] = json.dumps([{"Config": "config.json", "RepoTags": ["x"], "Layers": names}]).encode()
    path.write_bytes(tar_bytes(members))
    return path


def _scan(
    tmp_path: Path, layers: list[dict[str, bytes]], needles: list[object], config: dict[str, object] = CLEAN_CONFIG
) -> list[str]:
    report = check_layers.Report("image")
    check_layers.scan_archive(report, _archive(tmp_path / "image.tar", layers, config), needles)
    return report.findings


def _cert_needles(certs: dict[str, object]) -> list[object]:
    roots = check_layers.public_roots(certs["roots"])
    return check_layers.cert_needles(certs["bundle"].read_bytes(), roots)


# A layer as a Debian base has it: the public roots, python, no build settings.
BASE_FILES = {"usr/bin/python3.11": b"\x7fELF" + b"\0" * 64, "etc/os-release": b'ID=debian\nVERSION_ID="12"\n'}


def test_public_roots_pass_and_only_the_proxy_ca_is_a_needle(certs: dict[str, object], tmp_path: Path) -> None:
    needles = _cert_needles(certs)
    proxy_der = certs["proxy"].public_bytes(serialization.Encoding.DER)
    assert [n.data for n in needles if n.data.startswith(b"0")] == [proxy_der]
    files = {**BASE_FILES, "etc/ssl/certs/ca-certificates.crt": _pem(certs["public"])}
    assert _scan(tmp_path, [files], needles) == []


@pytest.mark.parametrize(
    "form",
    ["pem", "pem-rewrapped-crlf", "der", "whole-bundle"],
)
def test_the_proxy_ca_is_found_in_any_form(certs: dict[str, object], tmp_path: Path, form: str) -> None:
    proxy = certs["proxy"]
    body = base64.b64encode(proxy.public_bytes(serialization.Encoding.DER))
    data = {
        "pem": _pem(proxy),
        "pem-rewrapped-crlf": b"-----BEGIN CERTIFICATE-----\r\n"
        + b"\r\n".join(body[i : i + 76] for i in range(0, len(body), 76))
        + b"\r\n-----END CERTIFICATE-----\r\n",
        "der": b"junk" + proxy.public_bytes(serialization.Encoding.DER) + b"junk",
        "whole-bundle": certs["bundle"].read_bytes(),
    }[form]
    findings = _scan(tmp_path, [BASE_FILES, {"usr/local/share/thing/cert.bin": data}], _cert_needles(certs))
    assert findings and all(f.startswith("layer 2/2: usr/local/share/thing/cert.bin: certificate #1") for f in findings)


def test_placeholder_pem_blocks_in_source_code_are_no_error(certs: dict[str, object], tmp_path: Path) -> None:
    source = b'DOC = """-----BEGIN CERTIFICATE-----\n<your cert here>\n-----END CERTIFICATE-----"""\n'
    files = {**BASE_FILES, "venv/lib/site-packages/x/doc.py": source, "etc/ssl/a.pem": _pem(certs["public"])}
    assert _scan(tmp_path, [files], _cert_needles(certs)) == []


def test_a_file_deleted_by_a_later_layer_is_still_found(certs: dict[str, object], tmp_path: Path) -> None:
    layers = [BASE_FILES, {"tmp/ca.pem": _pem(certs["proxy"])}, {"tmp/.wh.ca.pem": b""}]
    findings = _scan(tmp_path, layers, _cert_needles(certs))
    assert findings and all(f.startswith("layer 2/3: tmp/ca.pem") for f in findings)


@pytest.mark.parametrize("name", ["etc/pip.conf", "root/.config/uv/uv.toml", "root/.netrc", "home/ml8s/.pypirc"])
def test_configuration_files_are_findings_whatever_they_hold(tmp_path: Path, name: str) -> None:
    assert _scan(tmp_path, [BASE_FILES, {name: b"[global]\n"}], []) == [
        f"layer 2/2: {name}: a pip/uv/netrc configuration or secret file"
    ]


def test_index_settings_and_machine_locations_are_needles_but_pypi_is_not(tmp_path: Path) -> None:
    secret = "https://ci:s3cr3t-t0ken@mirror.example/simple"
    env = f"PIP_INDEX_URL={secret}\nUV_DEFAULT_INDEX={secret}\nPIP_DEFAULT_TIMEOUT=180\n"
    needles = check_layers.setting_needles(env, ["file:///opt/pypi/simple", "https://pypi.org/simple/"])
    assert sorted({n.data for n in needles}) == [b"file:///opt/pypi/simple", secret.encode()]
    assert all("s3cr3t" not in n.what for n in needles), "a finding must not print the secret"
    pip_source = {"venv/lib/pip/_internal/models/index.py": b'PyPI = PackageIndex("https://pypi.org/", ...)'}
    assert _scan(tmp_path, [BASE_FILES, pip_source], needles) == []
    leaked = {"opt/venv/lib/python3.11/site-packages/x/direct_url.json": secret.encode()}
    assert _scan(tmp_path, [BASE_FILES, leaked], needles) == [
        "layer 2/2: opt/venv/lib/python3.11/site-packages/x/direct_url.json: index-env value of PIP_INDEX_URL",
    ]


@pytest.mark.parametrize(
    ("history", "env", "expected"),
    [
        (
            "|1 TORCH_INDEX=https://download.pytorch.org/whl/cu128 /bin/sh -c uv pip install",
            [],
            "history: 'https://download",
        ),
        ("/bin/sh -c pip install --extra-index-url x .", [], "history: 'index-url'"),
        ("/bin/sh -c pip install --find-links https://wheels.example/ x", [], "history: 'https://wheels.example/'"),
        ("/bin/sh -c #(nop) ENV SSL_CERT_FILE=/etc/ca.pem", [], "history: 'SSL_CERT_FILE'"),
        ("/bin/sh -c true", ["PIP_INDEX_URL=x"], "config: 'INDEX_URL'"),
        ("/bin/sh -c true", ["HF_TOKEN=abc"], "config: environment variable HF_TOKEN looks like a credential"),
        ("/bin/sh -c true", ["AWS_SECRET_ACCESS_KEY=abc"], "config: environment variable AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_config_and_history_findings(tmp_path: Path, history: str, env: list[str], expected: str) -> None:
    config = {"config": {"Env": ["PATH=/usr/bin", *env]}, "history": [{"created_by": history}]}
    findings = _scan(tmp_path, [BASE_FILES], [], config)
    assert any(f.startswith(expected) for f in findings), findings


def test_a_local_wheel_folder_in_the_history_is_no_finding(tmp_path: Path) -> None:
    config = {"history": [{"created_by": "/bin/sh -c uv pip install --find-links /mnt/wheels -r /mnt/t.txt"}]}
    assert _scan(tmp_path, [BASE_FILES], [], config) == []


def test_a_needle_in_the_config_is_found(tmp_path: Path) -> None:
    config = {"config": {"Labels": {"built-with": "file:///opt/pypi/simple"}}, "history": []}
    needles = check_layers.setting_needles("", ["file:///opt/pypi/simple"])
    assert "config: this machine's pip index location file:///opt/pypi/simple" in _scan(
        tmp_path, [BASE_FILES], needles, config
    )


def _fake_container(tmp_path: Path, archive: Path | None) -> str:
    """A `podman` stand-in whose `save -o PATH IMAGE` copies ``archive`` (or fails when there is none)."""
    script = tmp_path / "fake-podman"
    body = f'cp "{archive}" "$3"' if archive else 'echo "Error: image not known" >&2; exit 125'
    script.write_text(f'#!/bin/sh\n[ "$1" = save ] && [ "$2" = -o ] || exit 64\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_main_exit_status_clean_dirty_and_unreadable(
    certs: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--ca-bundle", str(certs["bundle"]), "--public-roots", str(certs["roots"])]
    clean = _archive(tmp_path / "clean.tar", [{**BASE_FILES, "etc/ssl/certs/x.pem": _pem(certs["public"])}])
    assert check_layers.main(["--container", _fake_container(tmp_path, clean), *common, "img:clean"]) == 0
    assert "img:clean: 1 layers, 3 files" in capsys.readouterr().out
    dirty = _archive(tmp_path / "dirty.tar", [BASE_FILES, {"root/ca.pem": _pem(certs["proxy"])}])
    assert check_layers.main(["--container", _fake_container(tmp_path, dirty), *common, "img:clean", "img:dirty"]) == 1
    out = capsys.readouterr().out
    assert "img:dirty: layer 2/2: root/ca.pem: certificate #1 of the CA bundle" in out
    assert check_layers.main(["--container", _fake_container(tmp_path, None), *common, "img:missing"]) == 2
    assert "image not known" in capsys.readouterr().err
    no_roots = ["--ca-bundle", str(certs["bundle"]), "--public-roots", str(tmp_path / "absent")]
    assert check_layers.main(["--container", _fake_container(tmp_path, clean), *no_roots, "img:clean"]) == 2


# --- images/build-env.sh: what a RUN step makes of the secrets ---------------------------------------


def _build_env(tmp_path: Path, secrets: dict[str, str]) -> tuple[dict[str, str], str]:
    folder = tmp_path / "secrets"
    folder.mkdir(exist_ok=True)
    for name, text in secrets.items():
        (folder / name).write_text(text)
    script = f'. "{IMAGES / "build-env.sh"}" && env -0'
    env = {"PATH": os.environ["PATH"], "BUILD_SECRETS": str(folder)}
    done = subprocess.run(["sh", "-c", script], capture_output=True, env=env, cwd=tmp_path, check=True)
    pairs = [p.split("=", 1) for p in done.stdout.decode().split("\0") if "=" in p]
    return {k: v for k, v in pairs if k not in env and k not in ("PWD", "SHLVL", "_")}, done.stderr.decode()


def test_build_env_without_secrets_sets_nothing(tmp_path: Path) -> None:
    assert _build_env(tmp_path, {}) == ({}, "")


def test_build_env_trusts_the_bundle_and_exports_index_settings(tmp_path: Path) -> None:
    index = "PIP_INDEX_URL=https://u:tok@mirror.example/simple\n# a comment\n\nUV_DEFAULT_INDEX=https://u:tok@mirror.example/simple"
    got, err = _build_env(tmp_path, {"ca-bundle": "PEM", "index-env": index})
    bundle = str(tmp_path / "secrets" / "ca-bundle")
    assert got == {
        "SSL_CERT_FILE": bundle,
        "PIP_CERT": bundle,
        "PIP_INDEX_URL": "https://u:tok@mirror.example/simple",
        "UV_DEFAULT_INDEX": "https://u:tok@mirror.example/simple",
    }
    assert err == ""


def test_build_env_exports_only_pip_and_uv_names_and_never_evaluates(tmp_path: Path) -> None:
    index = "\n".join(
        [
            "LD_PRELOAD=/tmp/evil.so",
            "PATH=/tmp/evil",
            "PIP_X=$(touch pwned)",
            "UV_Y=`touch pwned2`",
            "PIP_BAD-NAME=x",
            "no equals sign here",
            "https://u:leaked@host/simple=x",
            "PIP_LAST=kept-without-newline",
        ]
    )
    got, err = _build_env(tmp_path, {"index-env": index})
    assert got == {"PIP_X": "$(touch pwned)", "UV_Y": "`touch pwned2`", "PIP_LAST": "kept-without-newline"}
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert "LD_PRELOAD" in err and "PATH" in err and "evil" not in err and "leaked" not in err, "names, never values"


# --- images/index_env.py: this machine's settings -> the index-env secret ---------------------------


def test_index_env_keeps_reachable_indexes_and_drops_this_machines_paths() -> None:
    listed = "\n".join(
        [
            ":env:.default-timeout='180'",
            ":env:.find-links='/opt/wheels'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            "global.extra-index-url='file:///opt/pypi/simple https://mirror.example/extra'",
            "global.index-url='https://u:tok@mirror.example/simple'",
        ]
    )
    notes: list[str] = []
    lines = index_env.index_env(index_env.pip_settings(listed), {"UV_INDEX_URL": "https://uv.example/simple"}, notes)
    assert lines == [
        "PIP_DEFAULT_TIMEOUT=180",
        "PIP_EXTRA_INDEX_URL=https://mirror.example/extra",
        "PIP_INDEX_URL=https://u:tok@mirror.example/simple",
        "UV_DEFAULT_INDEX=https://u:tok@mirror.example/simple",
        "UV_HTTP_TIMEOUT=180",
        "UV_INDEX=https://mirror.example/extra",
        "UV_INDEX_URL=https://uv.example/simple",
    ]
    assert len(notes) == 2 and not any("opt" in n or "tok" in n for n in notes), notes


def test_index_env_of_nothing_is_empty() -> None:
    notes: list[str] = []
    assert index_env.index_env({}, {}, notes) == [] and notes == []


# --- images/check_pins.py --------------------------------------------------------------------------


def test_check_pins() -> None:
    constraints = "# header\nnumpy==2.4.4\ntorch==2.13.0\nPyYAML==6.0.3\n"
    assert check_pins.mismatches(
        constraints, "numpy==2.4.4\ntorch==2.13.0+cpu\npyyaml==6.0.3\nml8s @ file:///app\n"
    ) == (3, [])
    assert check_pins.mismatches(constraints, "numpy==2.4.3\ntorch==2.13.1+cu128\n") == (
        2,
        ["numpy: installed 2.4.3, pinned 2.4.4", "torch: installed 2.13.1+cu128, pinned 2.13.0"],
    )


# --- the Dockerfiles ----------------------------------------------------------------------------------


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in (IMAGES / name).read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def _args(name: str) -> dict[str, str]:
    return dict(a.split("=", 1) for i, a in _instructions(name) if i == "ARG" and "=" in a)


def _pin(name: str) -> str:
    text = (ROOT / "requirements" / "constraints.txt").read_text()
    match = re.search(rf"^{name}==(\S+)$", text, re.MULTILINE)
    assert match, name
    return match.group(1)


def test_defaults_are_the_cluster_images() -> None:
    fe, train = _args("Dockerfile.fe"), _args("Dockerfile.train")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", fe["PYTHON_IMAGE"])
    # One Python everywhere: the fe base's and the train image's CPython are the same release.
    assert fe["PYTHON_IMAGE"].split(":")[1].split("-")[0] == train["PYTHON"]
    assert re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+", train["UV_IMAGE"])
    # One uv: both images install with the same release (the local builds give both the same uv base).
    assert fe["UV_IMAGE"] == train["UV_IMAGE"]
    cuda = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-base-ubuntu\d+\.\d+", train["CUDA_IMAGE"])
    assert cuda, train["CUDA_IMAGE"]
    # CUDA_IMAGE, TORCH_INDEX and TORCH_CUDA change together.
    assert train["TORCH_INDEX"] == f"https://download.pytorch.org/whl/cu{cuda[1]}{cuda[2]}"
    assert train["TORCH_CUDA"] == f"{cuda[1]}.{cuda[2]}"
    assert train["TORCH_SPEC"] == f"torch=={_pin('torch')}"


@pytest.mark.parametrize("name", ["Dockerfile.fe", "Dockerfile.train"])
def test_build_settings_reach_notar_bytes(name: str) -> None:
    instructions = _instructions(name)
    final = max(i for i, (kind, _) in enumerate(instructions) if kind == "FROM")
    froms = [a for kind, a in instructions if kind == "FROM"]
    # Every base is a build argument with a default (a registry-free build replaces them all).
    assert all(f.split()[0].startswith("${") or f.split()[0] == "scratch" for f in froms), froms
    for i, (kind, args) in enumerate(instructions):
        assert kind != "ADD", "ADD fetches URLs: COPY only"
        if kind == "ENV":
            assert not re.search(r"INDEX|CERT|TOKEN|SECRET|TRUSTED", args), args
        if kind == "ARG" and i > final:
            # A build argument a RUN sees is written into that layer's history.
            assert not re.search(r"INDEX|CERT|TOKEN|SECRET|URL", args), args
        if kind == "RUN" and re.search(r"\b(pip|uv) (pip )?install|uv venv", args):
            for mount in ("type=secret,id=ca-bundle", "type=secret,id=index-env", "source=images/build-env.sh"):
                assert mount in args, (mount, args)
            assert ". /mnt/build-env.sh" in args
        if kind == "COPY":
            assert not re.search(r"(?i)pem|crt|pip\.conf|netrc|secret", args), args
    ignored = (ROOT / ".dockerignore").read_text()
    assert ignored.splitlines()[2] == "*" and not re.search(r"(?i)!.*(pem|crt|conf|netrc|secret)", ignored)


def test_the_podman_settings_go_to_a_private_file(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "PODMAN_CONF_DIR": str(tmp_path / "conf")}
    done = subprocess.run(
        [str(IMAGES / "base-images.sh"), "--conf-only"], capture_output=True, text=True, env=env, check=True
    )
    conf = (tmp_path / "conf" / "containers.conf").read_text()
    assert 'default_ulimits = ["nofile=20000", "nproc=32768"]' in conf and 'runtime = "runc"' in conf
    assert sorted(p.name for p in (tmp_path / "conf").iterdir()) == ["containers.conf"]
    assert str(tmp_path / "conf" / "containers.conf") in done.stdout


def test_make_images_passes_settings_as_secrets_only() -> None:
    dry = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "images",
            "CONTAINER=podman",
            "IMAGES_BASE=local",
            "CA_BUNDLE=/x/ca.pem",
            "TORCH_WHEELS=/nonexistent",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout.replace("\\\n", " ")
    builds = [" ".join(line.split()) for line in dry.splitlines() if " build " in line]
    assert len(builds) == 2, dry
    for line in builds:
        assert line.startswith(f"CONTAINERS_CONF={ROOT}/.podman/containers.conf podman build ")
        assert "--secret id=ca-bundle,src=/x/ca.pem" in line and "--secret id=index-env,src=" in line
        assert not re.search(r"--build-arg [A-Z_]*(CERT|TOKEN|SECRET)|--build-arg PIP_|--build-arg UV_INDEX", line), (
            line
        )
    assert "--build-arg PYTHON_IMAGE=localhost/ml8s-base/python:3.11-bookworm" in builds[0]
    assert all("--build-arg UV_IMAGE=localhost/ml8s-base/uv:" in line for line in builds), builds
    assert "--build-arg TORCH_CUDA= " in builds[1] and "--build-arg PYTHON=/usr/bin/python3.11" in builds[1]
    # podman 4.3 cannot mount a cached stage (the torch requirement): the train build must not use the cache.
    assert "--layers=false" in builds[1] and "--layers" not in builds[0]


def test_the_fe_smoke_script_leaves_every_bootstrap_input_unset() -> None:
    # images/smoke_fe.py runs only inside the fe image (make images-smoke): an input type it cannot
    # leave unset would first show there, after a 2-minute image build.
    from tasks.bootstrap import bootstrap_run
    from tasks.inputs import input_text

    smoke = _load("smoke_fe")
    inputs = bootstrap_run.python_interface.inputs
    assert inputs
    for name, kind in inputs.items():
        assert input_text(smoke.unset(kind)) == "", name


@pytest.mark.parametrize(
    ("target", "titles"), [("images", ["ml8s-fe", "ml8s-train"]), ("images-train-cuda", ["ml8s-train"])]
)
def test_every_build_drops_the_untagged_images_it_replaced_and_only_ours(target: str, titles: list[str]) -> None:
    # A rebuild moves the tag and leaves the old image untagged; on a CI host that builds every run the
    # leftovers filled the disk (2.3 GB a train image). Pruned before and after each build, by our title only.
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", target, "CONTAINER=podman", "TORCH_WHEELS=/nonexistent"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout.replace("\\\n", " ")
    steps = [" ".join(line.split()) for line in dry.splitlines() if " build " in line or " prune" in line]
    expected: list[str] = []
    for title in titles:
        prune = f"podman image prune -f --filter label=org.opencontainers.image.title={title} >/dev/null"
        expected += [prune, "build", prune]
    assert ["build" if " build " in s else re.sub(r"^CONTAINERS_CONF=\S+ ", "", s) for s in steps] == expected, dry
    assert not re.search(r"system prune|prune -a|prune --all", dry), dry
    for title in titles:
        recipe = (ROOT / "images" / ("Dockerfile.fe" if title == "ml8s-fe" else "Dockerfile.train")).read_text()
        assert f'org.opencontainers.image.title="{title}"' in recipe
