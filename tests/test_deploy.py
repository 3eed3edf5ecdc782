"""deploy/: the Flyte sandbox manifests, scripts and task environment, validated offline.

No cluster is needed: manifests are checked against the Kubernetes OpenAPI schemas shipped with
kubernetes-validate (strict: unknown fields fail), the scripts are syntax-checked (and shellchecked
when shellcheck is installed) and run in --dry-run mode, the registration arguments they build are fed
to `pyflyte package` (the same serialization `pyflyte register` does) and the result decoded, and the
data upload helper runs against moto's S3 server.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
SCRIPTS = sorted(DEPLOY.glob("*.sh"))
# The oldest schema kubernetes-validate ships (the sandbox's k3s is of that era) and a recent one.
K8S_VERSIONS = ("1.25.0", "1.31.0")
NAMESPACE = "ml8s"
# Facts of the `flytectl demo start` sandbox (see docs/sandbox.md for the sources).
SANDBOX_MINIO = "http://flyte-sandbox-minio.flyte.svc.cluster.local:9000"
SANDBOX_MINIO_USER, SANDBOX_MINIO_PASSWORD = "minio", "miniostorage"
REQUIRED_TASK_ENV = (
    "PIPELINE_ROOT_URI",
    "DATA_ROOT",
    "TARGET_COLUMN",
    "MLFLOW_TRACKING_URI",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "IMAGE_VERSION",
)


# --------------------------------------------------------------------------------------- helpers


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


DOCS = _docs()


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind}/{name} in deploy/*.yaml, found {len(found)}"
    return found[0]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload."""
    out = []
    for _, doc in DOCS:
        if doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            out.append((f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]))
        elif doc["kind"] == "Pod":
            out.append((f"Pod/{doc['metadata']['name']}", doc["spec"]))
    return out


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, container, pod spec) of every container and init container."""
    return [
        (f"{where}/{c['name']}", c, spec)
        for where, spec in _pod_specs()
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _arg(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def task_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for n, line in enumerate((DEPLOY / "task-env.env").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line), f"task-env.env:{n}: not KEY=VALUE: {line!r}"
        key, value = line.split("=", 1)
        assert key not in env, f"task-env.env:{n}: {key} set twice"
        env[key] = value
    return env


def _mlflow() -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = _one("Deployment", "mlflow")
    pod = deployment["spec"]["template"]["spec"]
    (server,) = [c for c in pod["containers"] if c["name"] == "mlflow"]
    return deployment, server


def _bucket_job_env() -> dict[str, str]:
    (mc,) = _one("Job", "ml8s-minio-bucket")["spec"]["template"]["spec"]["containers"]
    return _env(mc)


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of a script dry run: no user config, no inherited overrides."""
    keep = {"PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), DRY_RUN="1", IMAGE_VERSION="t1")
    return env


def _dry_run(script: str, home: Path, *args: str) -> list[list[str]]:
    """Run a deploy script with --dry-run; return the commands it would run."""
    done = subprocess.run(
        ["bash", str(DEPLOY / script), "--dry-run", *args],
        cwd=ROOT,
        env=_clean_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{script} --dry-run failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("+ ")]


def _options(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# ------------------------------------------------------------------------------------ manifests


def test_every_manifest_file_parses_and_is_applied_in_order() -> None:
    assert {p.name for p in MANIFESTS} >= {
        "namespace.yaml",
        "minio-credentials.yaml",
        "minio-bucket.yaml",
        "mlflow.yaml",
    }
    for _, doc in DOCS:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys()


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("source", "doc"), DOCS, ids=[f"{s}:{d['kind']}/{d['metadata']['name']}" for s, d in DOCS])
def test_manifest_is_valid_kubernetes_strict(source: str, doc: dict[str, Any], version: str) -> None:
    problem = ""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as error:  # the message only: the schema dump is huge
        problem = f"{error.message} at {'.'.join(str(p) for p in error.path) or '<root>'}"
    assert not problem, (
        f"{source}: {doc['kind']}/{doc['metadata']['name']} is invalid for Kubernetes {version}: {problem}"
    )


def test_everything_lives_in_the_ml8s_namespace() -> None:
    assert _one("Namespace", NAMESPACE)
    for source, doc in DOCS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{source}: {doc['kind']} outside {NAMESPACE}"


def test_images_are_pinned_by_tag() -> None:
    for label, container, _ in _containers():
        image = container["image"]
        name, _, tag = image.rpartition(":")
        assert "/" not in tag and name and tag, f"{label}: image {image} has no tag"
        assert tag != "latest", f"{label}: image {image} is not pinned (:latest)"
        assert container.get("imagePullPolicy", "IfNotPresent") != "Always", f"{label}: pulls on every start"
    assert not any(c["image"].startswith(("minio/", "docker.io/minio/")) for _, c, _ in _containers()), (
        "Docker Hub no longer serves minio/*: use quay.io/minio/*"
    )


def test_containers_run_as_non_root_with_minimal_privileges() -> None:
    for where, spec in _pod_specs():
        assert spec.get("automountServiceAccountToken") is False, f"{where}: mounts a service account token"
    for label, container, pod in _containers():
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert context.get("runAsNonRoot") is True, f"{label}: runAsNonRoot is not true"
        assert int(context.get("runAsUser", 0)) > 0, f"{label}: runs as uid 0"
        assert context.get("allowPrivilegeEscalation") is False, f"{label}: allows privilege escalation"
        assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{label}: keeps Linux capabilities"
        assert context.get("readOnlyRootFilesystem") is True, f"{label}: writable root filesystem"


def test_containers_have_resource_requests_and_limits() -> None:
    for label, container, _ in _containers():
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= resources.get(bound, {}).keys(), f"{label}: {bound} lack cpu or memory"


def test_volumes_secrets_and_claims_referenced_exist() -> None:
    secrets = {d["metadata"]["name"]: d for _, d in DOCS if d["kind"] == "Secret"}
    claims = {d["metadata"]["name"] for _, d in DOCS if d["kind"] == "PersistentVolumeClaim"}
    for where, spec in _pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, f"{where}: unknown claim"
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{where}/{container['name']}: mounts unknown volume {mount['name']}"
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]]["stringData"], f"{where}: {ref} not in the Secret"
            for source in container.get("envFrom", []):
                assert source["secretRef"]["name"] in secrets, f"{where}: envFrom an unknown Secret"


def test_credentials_secret_is_marked_sandbox_only_and_holds_the_sandbox_defaults() -> None:
    secret = _one("Secret", "ml8s-minio-credentials")
    text = (DEPLOY / "minio-credentials.yaml").read_text()
    assert "SANDBOX ONLY" in text
    assert secret["metadata"]["annotations"]["ml8s.io/sandbox-only"] == "true"
    assert secret["stringData"] == {
        "AWS_ACCESS_KEY_ID": SANDBOX_MINIO_USER,
        "AWS_SECRET_ACCESS_KEY": SANDBOX_MINIO_PASSWORD,
    }


def test_bucket_job_is_idempotent_and_bounded() -> None:
    job = _one("Job", "ml8s-minio-bucket")
    assert job["spec"]["backoffLimit"] <= 6 and job["spec"]["activeDeadlineSeconds"] <= 600
    (mc,) = job["spec"]["template"]["spec"]["containers"]
    script = mc["args"][0]
    assert mc["image"].startswith("quay.io/minio/mc:RELEASE.")
    assert script.count("mc mb --ignore-existing") == 2, "bucket and prefixes must both use --ignore-existing"
    assert "until mc ls" in script and "-ge 30" in script, "the wait for MinIO must be bounded"
    assert set(_env(mc)["PREFIXES"].split()) == {"pipeline", "data", "mlflow-artifacts"}


def test_mlflow_server_is_pinned_single_writer_and_probed() -> None:
    deployment, server = _mlflow()
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate", "sqlite allows one server"
    assert server["image"] == "ghcr.io/mlflow/mlflow:v3.17.2"
    constraints = (ROOT / "requirements" / "constraints.txt").read_text()
    assert re.search(r"^mlflow==3\.17\.2$", constraints, re.M), "the server must match the client's mlflow pin"
    (installer,) = spec["template"]["spec"]["initContainers"]
    boto3_pin = re.search(r"^boto3==(\S+)$", constraints, re.M)
    assert boto3_pin and f"boto3=={boto3_pin.group(1)}" in installer["command"]
    args = server["args"]
    assert _arg(args, "--backend-store-uri") == "sqlite:////mlflow/mlflow.db"
    assert any(m["mountPath"] == "/mlflow" for m in server["volumeMounts"])
    assert _arg(args, "--host") == "0.0.0.0"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = server[probe]["httpGet"]
        assert get["path"] == "/health"
        assert {"name": "Host", "value": "localhost"} in get["httpHeaders"], f"{probe}: Host must be allowed"
    assert "localhost" in _arg(args, "--allowed-hosts").split(",")


# ------------------------------------------------------------------------------ task environment


def test_task_env_has_every_variable_the_tasks_need() -> None:
    env = task_env()
    missing = [k for k in REQUIRED_TASK_ENV if not env.get(k)]
    assert not missing, f"deploy/task-env.env lacks {missing}"
    assert env["TARGET_COLUMN"] == "churned", "the demo data's label column"
    assert "SANDBOX ONLY" in (DEPLOY / "task-env.env").read_text()


def test_task_env_matches_the_bucket_layout() -> None:
    env, job = task_env(), _bucket_job_env()
    bucket, prefixes = job["BUCKET"], job["PREFIXES"].split()
    for key in ("PIPELINE_ROOT_URI", "DATA_ROOT"):
        uri = urlsplit(env[key])
        assert uri.scheme == "s3" and uri.netloc == bucket, f"{key}={env[key]} is not in bucket {bucket}"
        assert uri.path.strip("/").split("/")[0] in prefixes, f"{key}={env[key]}: prefix not created by the job"
    assert env["PIPELINE_ROOT_URI"] == f"s3://{bucket}/pipeline"
    _, server = _mlflow()
    destination = urlsplit(_arg(server["args"], "--artifacts-destination"))
    assert destination.netloc == bucket and destination.path.strip("/") in prefixes


def test_task_env_points_at_the_mlflow_service() -> None:
    env = task_env()
    uri = urlsplit(env["MLFLOW_TRACKING_URI"])
    service = _one("Service", "mlflow")
    deployment, server = _mlflow()
    assert uri.scheme == "http"
    assert uri.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    (port,) = service["spec"]["ports"]
    assert uri.port == port["port"]
    container_ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert container_ports[port["targetPort"]] == int(_arg(server["args"], "--port"))
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items(), "the Service selects no MLflow pod"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    allowed = _arg(server["args"], "--allowed-hosts").split(",")
    assert uri.netloc in allowed and uri.hostname in allowed, "MLflow would reject the tasks' Host header"


def test_task_env_points_at_the_sandbox_minio_with_the_secret_credentials() -> None:
    env = task_env()
    _, server = _mlflow()
    assert env["AWS_ENDPOINT_URL"] == SANDBOX_MINIO
    assert env.get("FLYTE_AWS_ENDPOINT", SANDBOX_MINIO) == SANDBOX_MINIO
    assert _bucket_job_env()["MINIO_ENDPOINT"] == SANDBOX_MINIO
    assert _env(server)["MLFLOW_S3_ENDPOINT_URL"] == SANDBOX_MINIO
    secret = _one("Secret", "ml8s-minio-credentials")["stringData"]
    assert env["AWS_ACCESS_KEY_ID"] == secret["AWS_ACCESS_KEY_ID"]
    assert env["AWS_SECRET_ACCESS_KEY"] == secret["AWS_SECRET_ACCESS_KEY"]
    common = (DEPLOY / "common.sh").read_text()
    host = urlsplit(SANDBOX_MINIO).hostname or ""
    service, namespace = host.split(".")[:2]
    assert f'MINIO_SERVICE="${{MINIO_SERVICE:-{service}}}"' in common
    assert f'MINIO_NAMESPACE="${{MINIO_NAMESPACE:-{namespace}}}"' in common
    assert f'ML8S_NAMESPACE="${{ML8S_NAMESPACE:-{NAMESPACE}}}"' in common


# -------------------------------------------------------------------------------------- scripts


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script_syntax(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if script.name != "common.sh":
        assert script.read_text().splitlines()[0] == "#!/usr/bin/env bash"
        assert "set -euo pipefail" in script.read_text()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_scripts_are_shellcheck_clean() -> None:
    done = subprocess.run(
        ["shellcheck", "-x", *[str(s.relative_to(ROOT)) for s in SCRIPTS]], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def register_commands(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    return _dry_run("register.sh", tmp_path_factory.mktemp("home"))


def _pyflyte(commands: list[list[str]], verb: str) -> list[str]:
    found = [c for c in commands if Path(c[0]).name == "pyflyte" and verb in c[1:3]]
    assert len(found) == 1, f"expected one pyflyte {verb} command, got {found}"
    return found[0]


def test_register_dry_run_applies_every_manifest_and_waits_bounded(register_commands: list[list[str]]) -> None:
    applied = [_arg(c, "-f") for c in register_commands if "apply" in c]
    assert applied[:2] == ["deploy/namespace.yaml", "deploy/minio-credentials.yaml"]
    assert sorted(applied) == sorted(f"deploy/{p.name}" for p in MANIFESTS)
    waits = [c for c in register_commands if "wait" in c or "rollout" in c]
    assert len(waits) == 2 and all(any(a.startswith("--timeout=") for a in c) for c in waits)
    uploads = [c for c in register_commands if "deploy/upload_data.py" in c]
    assert len(uploads) == 1
    env = task_env()
    assert _arg(uploads[0], "--dest") == env["DATA_ROOT"]
    assert _arg(uploads[0], "--probe") == env["PIPELINE_ROOT_URI"]


def test_register_dry_run_registers_with_images_env_and_activation(register_commands: list[list[str]]) -> None:
    argv = _pyflyte(register_commands, "register")
    assert argv[-1] == "workflows"
    assert _arg(argv, "--project") == "flytesnacks" and _arg(argv, "--domain") == "development"
    assert _arg(argv, "--version").startswith("t1-"), "registration version = IMAGE_VERSION + code hash"
    assert "--activate-launchplans" in argv
    assert sorted(_options(argv, "--image")) == sorted(
        ["localhost:30000/ml8s-train:t1", "fe=localhost:30000/ml8s-fe:t1", "train=localhost:30000/ml8s-train:t1"]
    )
    expected = {**task_env(), "IMAGE_VERSION": "t1"}
    assert dict(e.split("=", 1) for e in _options(argv, "--env")) == expected


def test_run_dry_run_launches_the_workflow_with_the_same_images_and_env(
    register_commands: list[list[str]], tmp_path: Path
) -> None:
    argv = _pyflyte(_dry_run("run.sh", tmp_path, "--", "--epochs", "3"), "run")
    registered = _pyflyte(register_commands, "register")
    assert "--remote" in argv and _arg(argv, "--copy") == "all", "ml8s modules are imported lazily: copy all"
    assert sorted(_options(argv, "--image")) == sorted(_options(registered, "--image"))
    assert _options(argv, "--env") == _options(registered, "--env")
    assert argv[-4:] == ["workflows/training.py", "training_pipeline", "--epochs", "3"]
    launch = _dry_run("run.sh", tmp_path, "--launch-plan", "training_force_rerun_lp")
    assert [c[:3] for c in launch] == [["flytectl", "get", "launchplan"], ["flytectl", "create", "execution"]]
    assert "training_force_rerun_lp" in launch[0] and "--latest" in launch[0]


def test_registration_arguments_serialize_every_task_with_its_image_and_env(
    register_commands: list[list[str]], tmp_path: Path
) -> None:
    """`pyflyte package` with register.sh's --image/--env gives every task the right image and environment."""
    from flyteidl.admin import launch_plan_pb2, task_pb2

    argv = _pyflyte(register_commands, "register")
    images = [a for i in _options(argv, "--image") for a in ("--image", i)]
    envs = [a for e in _options(argv, "--env") for a in ("--env", e)]
    out = tmp_path / "pkg.tgz"
    done = subprocess.run(
        [str(BIN / "pyflyte"), "--pkgs", "workflows", "package", *images, *envs, "--output", str(out), "--force"],
        cwd=ROOT,
        env={**os.environ, "HOME": str(tmp_path), "IMAGE_VERSION": "t1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tasks: dict[str, Any] = {}
    plans: dict[str, Any] = {}
    with tarfile.open(out) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            data = handle.read() if handle is not None else b""
            if member.name.endswith("_1.pb"):
                spec = task_pb2.TaskSpec()
                spec.ParseFromString(data)
                tasks[spec.template.id.name] = (spec.template.container, spec.template.metadata)
            elif member.name.endswith("_lp_3.pb"):
                plan = launch_plan_pb2.LaunchPlan()
                plan.ParseFromString(data)
                plans[plan.id.name] = plan.spec
    assert tasks, "no task serialized"
    expected_env = dict(e.split("=", 1) for e in _options(argv, "--env"))
    default = next(i for i in _options(argv, "--image") if "=" not in i)
    named = dict(i.split("=", 1) for i in _options(argv, "--image") if "=" in i)
    used = {container.image for container, _ in tasks.values()}
    assert {named["fe"], named["train"]} <= used, f"the fe and train images must both be used: {used}"
    for name, (container, metadata) in tasks.items():
        assert container.image in {default, *named.values()}, f"{name} runs in {container.image}"
        assert "flytekit" not in container.image, f"{name} would run in flytekit's stock image"
        env = {kv.key: kv.value for kv in container.env}
        assert expected_env.items() <= env.items(), f"{name} lacks part of the task environment"
        if metadata.discoverable:
            assert metadata.discovery_version == "t1", f"{name}: cache version is not IMAGE_VERSION"
    assert plans["training_nightly_lp"].entity_metadata.schedule.cron_schedule.schedule
    fixed = plans["training_force_rerun_lp"].fixed_inputs.literals["force_rerun"]
    assert fixed.scalar.union.value.scalar.primitive.boolean is True


# ---------------------------------------------------------------------------------- data upload


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def upload_data(monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(DEPLOY))
    import upload_data

    return upload_data


def test_upload_is_byte_exact_single_put_and_idempotent(upload_data: Any, s3_endpoint: str, tmp_path: Path) -> None:
    source = tmp_path / "churn"
    (source / "sub").mkdir(parents=True)
    files = {"part-00000.csv": b"a,b\n1,2\n", "sub/part-00001.csv": b"a,b\n3,4\n" * 1000, ".hidden": b"x"}
    for rel, data in files.items():
        (source / rel).write_bytes(data)
    client = upload_data.make_client(s3_endpoint)
    client.create_bucket(Bucket="upload")
    argv = ["--endpoint", s3_endpoint, "--source", str(source), "--dest", "s3://upload/data/churn"]
    assert upload_data.main(argv) == 0
    listed = upload_data.existing_objects(client, "upload", "data/churn")
    assert listed == {f"data/churn/{r}": (len(d), hashlib.md5(d).hexdigest()) for r, d in files.items()}
    assert upload_data.upload(client, source, "s3://upload/data/churn", allow_extra=False) == (0, len(files))
    (source / "part-00000.csv").write_bytes(b"a,b\n9,9\n")
    assert upload_data.upload(client, source, "s3://upload/data/churn", allow_extra=False) == (1, len(files) - 1)


def test_upload_refuses_a_prefix_holding_another_dataset(upload_data: Any, s3_endpoint: str, tmp_path: Path) -> None:
    source = tmp_path / "d"
    source.mkdir()
    (source / "a.csv").write_bytes(b"x\n1\n")
    client = upload_data.make_client(s3_endpoint)
    client.create_bucket(Bucket="other")
    client.put_object(Bucket="other", Key="data/churn/foreign.csv", Body=b"y\n")
    client.put_object(Bucket="other", Key="data/churn/", Body=b"")  # a prefix marker is not data
    with pytest.raises(SystemExit, match=r"foreign\.csv"):
        upload_data.upload(client, source, "s3://other/data/churn", allow_extra=False)
    assert upload_data.upload(client, source, "s3://other/data/churn", allow_extra=True) == (1, 0)


def test_conditional_write_probe_passes_on_a_store_that_honours_them(upload_data: Any, s3_endpoint: str) -> None:
    client = upload_data.make_client(s3_endpoint)
    client.create_bucket(Bucket="probe")
    assert upload_data.probe_conditional_writes(client, "s3://probe/pipeline") == []
    assert client.list_objects_v2(Bucket="probe").get("KeyCount") == 0, "the probe must clean up"


def test_register_dry_run_says_nothing_was_registered(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(DEPLOY / "register.sh"), "--dry-run"],
        cwd=ROOT,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "nothing was applied or registered" in done.stdout and "ml8s is registered" not in done.stdout
