#!/usr/bin/env bash
# Deploy ml8s onto a running Flyte sandbox (`flytectl demo start`) and register the workflows.
#
#   1. check the prerequisites (kubectl, flytectl, the venv, the sandbox, the images in its registry);
#   2. apply deploy/*.yaml: namespace ml8s, MinIO credentials, the bucket job, the MLflow server, and
#      wait (bounded) for the job to complete and MLflow to roll out;
#   3. upload the demo data to DATA_ROOT (s3://ml8s/data/churn) through the sandbox's MinIO API
#      (localhost:30002, or a kubectl port-forward) and probe conditional-write support;
#   4. pyflyte register the workflows package with the three images and the task environment of
#      deploy/task-env.env, activating the launch plans.
#
# Usage: bash deploy/register.sh [--dry-run]     (make sandbox-register does this)
# Environment: IMAGE_VERSION, FE_IMAGE, TRAIN_IMAGE, DEFAULT_IMAGE, REGISTER_VERSION,
#   ACTIVATE_LAUNCHPLANS=0 (register without activating), SKIP_IMAGE_CHECK=1, SKIP_DATA_UPLOAD=1,
#   REQUIRE_CONDITIONAL_WRITES=1, TASK_RESOURCE_REQUESTS / TASK_RESOURCE_LIMITS ('cpu=1,mem=4Gi'),
#   DRY_RUN=1 (same as --dry-run: print the commands, touch nothing). See docs/sandbox.md.
set -euo pipefail

# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument '$arg' (usage: bash deploy/register.sh [--dry-run])" ;;
    esac
done

cd "$ML8S_ROOT"

BUCKET_JOB_TIMEOUT="${BUCKET_JOB_TIMEOUT:-180s}"
MLFLOW_ROLLOUT_TIMEOUT="${MLFLOW_ROLLOUT_TIMEOUT:-600s}"
DEMO_DATA="${DEMO_DATA:-demo_data/churn}"
PORT_FORWARD_PORT="${PORT_FORWARD_PORT:-19000}"

# ---------------------------------------------------------------------------------------------
# 1. Prerequisites
# ---------------------------------------------------------------------------------------------
say "checking prerequisites"
require_cmd kubectl "Install it: https://kubernetes.io/docs/tasks/tools/"
require_cmd flytectl "Install it (curl -sL https://ctl.flyte.org/install | bash) and start the sandbox: flytectl demo start"
require_cmd curl "Install curl (used to check the sandbox registry and MinIO)."
if ! command -v docker >/dev/null 2>&1; then
    warn "docker not found: fine if the images were built and pushed elsewhere ('make images images-push' needs docker, or CONTAINER=podman)"
fi
if [ "$DRY_RUN" != 1 ]; then
    require_venv
fi
use_sandbox_config
load_task_env

# Registration version: IMAGE_VERSION plus a hash of the files fast registration uploads (every file
# git does not ignore, this task environment included), so registering changed code never collides
# with an earlier registration of the same IMAGE_VERSION (Flyte refuses to re-register a version
# with a different structure), while re-registering unchanged code is a no-op. REGISTER_VERSION
# overrides it (e.g. REGISTER_VERSION=$IMAGE_VERSION).
code_hash() {
    if git -C "$ML8S_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
        git -C "$ML8S_ROOT" ls-files -z --cached --others --exclude-standard |
            "$PYTHON" -c '
import hashlib, sys
paths = sorted(p for p in sys.stdin.buffer.read().split(b"\0") if p)
h = hashlib.sha256()
for p in paths:
    try:
        data = open(p, "rb").read()
    except FileNotFoundError:
        continue
    h.update(p + b"\0" + hashlib.sha256(data).digest())
print(h.hexdigest()[:10])'
    else
        date -u +%Y%m%d%H%M%S
    fi
}
if [ -z "${REGISTER_VERSION:-}" ]; then
    if [ -x "$PYTHON" ]; then
        REGISTER_VERSION="$IMAGE_VERSION-$(code_hash)"
    else
        REGISTER_VERSION="$IMAGE_VERSION"
    fi
fi

if [ "$DRY_RUN" != 1 ]; then
    select_kube_context
    kube get namespace "$MINIO_NAMESPACE" --request-timeout=15s >/dev/null 2>&1 ||
        die "cannot reach the sandbox cluster (kubectl ${KUBECTL_ARGS[*]:-} get namespace $MINIO_NAMESPACE failed). Start it with 'flytectl demo start'."
    kube -n "$MINIO_NAMESPACE" get service "$MINIO_SERVICE" --request-timeout=15s >/dev/null 2>&1 ||
        die "service $MINIO_SERVICE not found in namespace $MINIO_NAMESPACE: is this a 'flytectl demo start' sandbox? (set MINIO_NAMESPACE/MINIO_SERVICE and edit deploy/*.yaml otherwise)"
else
    select_kube_context
fi

# The sandbox registry speaks the Docker registry HTTP API: check that each image tag is there.
check_image() {
    local image="$1" host rest repo tag
    case "$image" in
        "$REGISTRY"/*) ;;
        *) return 0 ;; # another registry: the cluster's pull will tell
    esac
    host="${image%%/*}"
    rest="${image#*/}"
    repo="${rest%:*}"
    tag="${rest##*:}"
    if ! curl -fsS -o /dev/null --max-time 10 -I \
        -H 'Accept: application/vnd.oci.image.index.v1+json' \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$host/v2/$repo/manifests/$tag"; then
        die "image $image is not in the sandbox registry: build and push it first (make images images-push IMAGE_VERSION=$IMAGE_VERSION), or SKIP_IMAGE_CHECK=1"
    fi
}
if [ "$DRY_RUN" != 1 ] && [ "${SKIP_IMAGE_CHECK:-0}" != 1 ]; then
    for image in "$DEFAULT_IMAGE" "$FE_IMAGE" "$TRAIN_IMAGE"; do
        check_image "$image"
    done
fi

# ---------------------------------------------------------------------------------------------
# 2. Manifests: namespace, credentials, bucket job, MLflow
# ---------------------------------------------------------------------------------------------
say "applying deploy/*.yaml (namespace $ML8S_NAMESPACE)"
kube apply -f deploy/namespace.yaml
kube apply -f deploy/minio-credentials.yaml
# A Job's pod template is immutable and a finished Job never runs again: replace it.
kube -n "$ML8S_NAMESPACE" delete job ml8s-minio-bucket --ignore-not-found --wait=true --timeout=60s
kube apply -f deploy/minio-bucket.yaml
kube apply -f deploy/mlflow.yaml

say "waiting for the bucket job (at most $BUCKET_JOB_TIMEOUT)"
if ! kube -n "$ML8S_NAMESPACE" wait --for=condition=complete job/ml8s-minio-bucket --timeout="$BUCKET_JOB_TIMEOUT"; then
    kube -n "$ML8S_NAMESPACE" logs job/ml8s-minio-bucket --tail=50 || true
    die "the bucket job did not complete; see the log above (kubectl -n $ML8S_NAMESPACE describe job ml8s-minio-bucket)"
fi

say "waiting for MLflow to roll out (at most $MLFLOW_ROLLOUT_TIMEOUT; the first start pulls the image)"
if ! kube -n "$ML8S_NAMESPACE" rollout status deployment/mlflow --timeout="$MLFLOW_ROLLOUT_TIMEOUT"; then
    kube -n "$ML8S_NAMESPACE" get pods -l app.kubernetes.io/name=mlflow -o wide || true
    kube -n "$ML8S_NAMESPACE" logs deployment/mlflow --all-containers --tail=50 || true
    die "MLflow did not become ready; see above (kubectl -n $ML8S_NAMESPACE describe pod -l app.kubernetes.io/name=mlflow)"
fi

# ---------------------------------------------------------------------------------------------
# 3. Demo data -> DATA_ROOT, through the MinIO API as seen from this machine
# ---------------------------------------------------------------------------------------------
DATA_ROOT_URI="$(task_env DATA_ROOT)"
PIPELINE_ROOT="$(task_env PIPELINE_ROOT_URI)"
PF_PID=""
stop_port_forward() {
    if [ -n "$PF_PID" ]; then
        kill "$PF_PID" 2>/dev/null || true
        wait "$PF_PID" 2>/dev/null || true
    fi
}
trap stop_port_forward EXIT

minio_live() {
    curl -fsS -o /dev/null --max-time 5 "$1/minio/health/live"
}

if [ "${SKIP_DATA_UPLOAD:-0}" = 1 ]; then
    say "SKIP_DATA_UPLOAD=1: not uploading data"
elif [ "${DATA_ROOT_URI#s3://}" = "$DATA_ROOT_URI" ]; then
    warn "DATA_ROOT=$DATA_ROOT_URI is not an s3:// URI: not uploading the demo data"
else
    if [ ! -d "$DEMO_DATA" ]; then
        say "generating the demo data in $DEMO_DATA"
        run_cmd "$PYTHON" -m ml8s.data.demo --out "$DEMO_DATA"
    fi
    endpoint="$MINIO_LOCAL_ENDPOINT"
    if [ "$DRY_RUN" != 1 ] && ! minio_live "$endpoint"; then
        say "MinIO is not answering on $endpoint; port-forwarding svc/$MINIO_SERVICE to localhost:$PORT_FORWARD_PORT"
        kubectl ${KUBECTL_ARGS[@]+"${KUBECTL_ARGS[@]}"} -n "$MINIO_NAMESPACE" port-forward \
            "svc/$MINIO_SERVICE" "$PORT_FORWARD_PORT:9000" >/dev/null 2>&1 &
        PF_PID=$!
        endpoint="http://localhost:$PORT_FORWARD_PORT"
        tries=0
        until minio_live "$endpoint"; do
            tries=$((tries + 1))
            [ "$tries" -lt 30 ] || die "MinIO is unreachable both on $MINIO_LOCAL_ENDPOINT and through a port-forward"
            sleep 1
        done
    fi
    say "uploading $DEMO_DATA to $DATA_ROOT_URI via $endpoint"
    probe=(--probe "$PIPELINE_ROOT")
    if [ "${REQUIRE_CONDITIONAL_WRITES:-0}" = 1 ]; then
        probe+=(--require-conditional-writes)
    fi
    run_cmd env \
        "AWS_ACCESS_KEY_ID=$(task_env AWS_ACCESS_KEY_ID)" \
        "AWS_SECRET_ACCESS_KEY=$(task_env AWS_SECRET_ACCESS_KEY)" \
        "AWS_DEFAULT_REGION=$(task_env AWS_DEFAULT_REGION)" \
        AWS_EC2_METADATA_DISABLED=true \
        "$PYTHON" deploy/upload_data.py --endpoint "$endpoint" --source "$DEMO_DATA" --dest "$DATA_ROOT_URI" \
        "${probe[@]}"
    stop_port_forward
    PF_PID=""
fi

# ---------------------------------------------------------------------------------------------
# 4. Register the workflows and launch plans
# ---------------------------------------------------------------------------------------------
register_opts=(--project "$FLYTE_PROJECT" --domain "$FLYTE_DOMAIN" --version "$REGISTER_VERSION")
if [ "${ACTIVATE_LAUNCHPLANS:-1}" = 1 ]; then
    register_opts+=(--activate-launchplans)
fi
if [ -n "${TASK_RESOURCE_REQUESTS:-}" ]; then
    register_opts+=(--resource-requests "$TASK_RESOURCE_REQUESTS")
fi
if [ -n "${TASK_RESOURCE_LIMITS:-}" ]; then
    register_opts+=(--resource-limits "$TASK_RESOURCE_LIMITS")
fi

say "registering workflows (project $FLYTE_PROJECT, domain $FLYTE_DOMAIN, version $REGISTER_VERSION)"
run_cmd "$PYFLYTE" register "${register_opts[@]}" "${IMAGE_ARGS[@]}" "${TASK_ENV_ARGS[@]}" workflows

if [ "$DRY_RUN" = 1 ]; then
    printf '\ndry run: nothing was applied or registered; the commands above are what a real run executes.\n'
    exit 0
fi

cat <<EOF

ml8s is registered on the sandbox (version $REGISTER_VERSION).
  Run the pipeline:        make sandbox-run          (or: bash deploy/run.sh)
  Force a re-run:          bash deploy/run.sh --launch-plan training_force_rerun_lp
  Executions:              $(executions_url)
  MLflow UI:               kubectl ${KUBECTL_ARGS[*]:-} -n $ML8S_NAMESPACE port-forward svc/mlflow 5000:5000, then http://localhost:5000
  MinIO console:           http://localhost:30080/minio (minio / miniostorage); artifacts under $PIPELINE_ROOT/ml8s_training_runs/
EOF
if [ "${ACTIVATE_LAUNCHPLANS:-1}" = 1 ]; then
    cat <<EOF
  Nightly schedule:        training_nightly_lp is ACTIVE (cron '0 2 * * *'). Stop it with
                           flytectl update launchplan -p $FLYTE_PROJECT -d $FLYTE_DOMAIN training_nightly_lp --version $REGISTER_VERSION --deactivate
EOF
else
    cat <<EOF
  Nightly schedule:        not active. Start it with
                           flytectl update launchplan -p $FLYTE_PROJECT -d $FLYTE_DOMAIN training_nightly_lp --version $REGISTER_VERSION --activate
EOF
fi
