# shellcheck shell=bash
# Shared by deploy/register.sh and deploy/run.sh (sourced, never run): defaults, the task
# environment, and small helpers. Works with bash 3.2 (macOS): no mapfile, no associative arrays,
# and possibly-empty arrays are expanded as ${a[@]+"${a[@]}"} so `set -u` does not trip on them.

ML8S_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPLOY_DIR="$ML8S_ROOT/deploy"

# Images: the Flyte sandbox ships a registry on localhost:30000 (`make images images-push` pushes there).
# Exported: it is also the Flyte cache version, which tasks/_util.py reads when pyflyte serializes.
IMAGE_VERSION="${IMAGE_VERSION:-dev}"
export IMAGE_VERSION
REGISTRY="${REGISTRY:-localhost:30000}"
FE_IMAGE="${FE_IMAGE:-$REGISTRY/ml8s-fe:$IMAGE_VERSION}"
TRAIN_IMAGE="${TRAIN_IMAGE:-$REGISTRY/ml8s-train:$IMAGE_VERSION}"
# Tasks that name no image (bootstrap, gate, snapshot, register, finalize) run in the default image.
# They need ml8s and mlflow, so the default is the training image, never flytekit's stock image.
DEFAULT_IMAGE="${DEFAULT_IMAGE:-$TRAIN_IMAGE}"

# Where the sandbox puts things (flytectl demo start).
FLYTE_PROJECT="${FLYTE_PROJECT:-flytesnacks}"
FLYTE_DOMAIN="${FLYTE_DOMAIN:-development}"
FLYTE_CONSOLE="${FLYTE_CONSOLE:-http://localhost:30080/console}"
KUBE_CONTEXT="${KUBE_CONTEXT:-flyte-sandbox}"
MINIO_NAMESPACE="${MINIO_NAMESPACE:-flyte}"
MINIO_SERVICE="${MINIO_SERVICE:-flyte-sandbox-minio}"
MINIO_LOCAL_ENDPOINT="${MINIO_LOCAL_ENDPOINT:-http://localhost:30002}"
ML8S_NAMESPACE="${ML8S_NAMESPACE:-ml8s}"

TASK_ENV_FILE="${TASK_ENV_FILE:-$DEPLOY_DIR/task-env.env}"
VENV_BIN="${VENV_BIN:-$ML8S_ROOT/.venv/bin}"
PYFLYTE="${PYFLYTE:-$VENV_BIN/pyflyte}"
PYTHON="${PYTHON:-$VENV_BIN/python}"
# DRY_RUN=1: check nothing on the cluster, print every command instead of running it.
DRY_RUN="${DRY_RUN:-0}"

say() { printf '==> %s\n' "$*"; }
warn() { printf 'ml8s deploy: WARNING: %s\n' "$*" >&2; }
die() {
    printf 'ml8s deploy: ERROR: %s\n' "$*" >&2
    exit 1
}

# Run a command, or only print it (shell-quoted, prefixed with "+") when DRY_RUN=1.
run_cmd() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

# require_cmd NAME HINT: fail with HINT when NAME is not on PATH (only a warning in a dry run).
require_cmd() {
    if command -v "$1" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$DRY_RUN" = 1 ]; then
        warn "$1 not found (dry run, continuing): $2"
    else
        die "$1 not found. $2"
    fi
}

require_venv() {
    if [ -x "$PYFLYTE" ] && [ -x "$PYTHON" ]; then
        return 0
    fi
    die "$PYFLYTE or $PYTHON is missing: run 'make setup' first (or set PYFLYTE and PYTHON)"
}

# Point pyflyte and flytectl at the sandbox unless the user chose a config.
use_sandbox_config() {
    if [ -n "${FLYTECTL_CONFIG:-}" ]; then
        [ -f "$FLYTECTL_CONFIG" ] || die "FLYTECTL_CONFIG=$FLYTECTL_CONFIG does not exist"
        return 0
    fi
    if [ -f "$HOME/.flyte/config-sandbox.yaml" ]; then
        export FLYTECTL_CONFIG="$HOME/.flyte/config-sandbox.yaml"
    elif [ "$DRY_RUN" = 1 ]; then
        warn "no ~/.flyte/config-sandbox.yaml (dry run, continuing)"
    else
        die "no Flyte config: start the sandbox with 'flytectl demo start' (it writes ~/.flyte/config-sandbox.yaml) or set FLYTECTL_CONFIG"
    fi
}

# TASK_ENV (KEY=VALUE words) and TASK_ENV_ARGS (--env KEY=VALUE ...) from $TASK_ENV_FILE.
# IMAGE_VERSION always takes the value of $IMAGE_VERSION, so the tasks know their own image tag.
TASK_ENV=()
TASK_ENV_ARGS=()
load_task_env() {
    [ -f "$TASK_ENV_FILE" ] || die "task environment file $TASK_ENV_FILE not found"
    local line key value
    TASK_ENV=()
    TASK_ENV_ARGS=()
    while IFS= read -r line || [ -n "$line" ]; do
        line="${line%$'\r'}"
        case "$line" in
            '#'* | '') continue ;;
        esac
        [[ "$line" =~ ^[A-Z_][A-Z0-9_]*=[^[:space:]]*$ ]] ||
            die "$TASK_ENV_FILE: malformed line '$line' (expected KEY=VALUE, no spaces or quotes)"
        key="${line%%=*}"
        value="${line#*=}"
        if [ "$key" = IMAGE_VERSION ]; then
            value="$IMAGE_VERSION"
        fi
        TASK_ENV+=("$key=$value")
        TASK_ENV_ARGS+=(--env "$key=$value")
    done <"$TASK_ENV_FILE"
}

# task_env KEY: the value of KEY in the loaded task environment (empty when absent).
task_env() {
    local item
    for item in ${TASK_ENV[@]+"${TASK_ENV[@]}"}; do
        if [ "${item%%=*}" = "$1" ]; then
            printf '%s\n' "${item#*=}"
            return 0
        fi
    done
    return 0
}

# The three images, in pyflyte's --image syntax (the unnamed one is the default image).
# shellcheck disable=SC2034  # used by the scripts that source this file
IMAGE_ARGS=(--image "$DEFAULT_IMAGE" --image "fe=$FE_IMAGE" --image "train=$TRAIN_IMAGE")

# kubectl against the sandbox's context when it exists (flytectl demo start creates "flyte-sandbox").
KUBECTL_ARGS=()
select_kube_context() {
    if [ "$DRY_RUN" = 1 ]; then
        KUBECTL_ARGS=(--context "$KUBE_CONTEXT")
        return 0
    fi
    if kubectl config get-contexts -o name 2>/dev/null | grep -qx "$KUBE_CONTEXT"; then
        KUBECTL_ARGS=(--context "$KUBE_CONTEXT")
    else
        warn "kubectl context '$KUBE_CONTEXT' not found; using the current context ($(kubectl config current-context 2>/dev/null || echo none))"
        KUBECTL_ARGS=()
    fi
}
kube() {
    run_cmd kubectl ${KUBECTL_ARGS[@]+"${KUBECTL_ARGS[@]}"} "$@"
}

# The Flyte console page of the project's executions.
executions_url() {
    printf '%s/projects/%s/domains/%s/executions\n' "$FLYTE_CONSOLE" "$FLYTE_PROJECT" "$FLYTE_DOMAIN"
}
