#!/usr/bin/env bash
# Launch ml8s's training pipeline on the Flyte sandbox and print the execution's console URL.
#
#   bash deploy/run.sh [--wait] [--overwrite-cache] [-- WORKFLOW INPUTS...]
#       pyflyte run --remote workflows/training.py training_pipeline, with the same images and task
#       environment as deploy/register.sh. Workflow inputs go after "--", e.g.
#       bash deploy/run.sh -- --epochs 20        (another config: another RUN_ID)
#       bash deploy/run.sh -- --force_rerun true  (re-run Steps 2-7 of an existing run, no cache hit)
#   bash deploy/run.sh --launch-plan NAME
#       launch a launch plan registered by deploy/register.sh with flytectl, e.g.
#       bash deploy/run.sh --launch-plan training_force_rerun_lp
#
# Environment: IMAGE_VERSION, FE_IMAGE, TRAIN_IMAGE, DEFAULT_IMAGE, FLYTE_PROJECT, FLYTE_DOMAIN,
#   DRY_RUN=1 (print the commands only). See docs/sandbox.md.
set -euo pipefail

# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

launch_plan=""
pyflyte_opts=()
while [ $# -gt 0 ]; do
    case "$1" in
        --launch-plan)
            [ $# -ge 2 ] || die "--launch-plan needs a name (e.g. training_force_rerun_lp)"
            launch_plan="$2"
            shift 2
            ;;
        --wait)
            pyflyte_opts+=(--wait)
            shift
            ;;
        --overwrite-cache)
            pyflyte_opts+=(--overwrite-cache)
            shift
            ;;
        --dry-run)
            DRY_RUN=1
            shift
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
            exit 0
            ;;
        --)
            shift
            break
            ;;
        *) die "unknown argument '$1' (workflow inputs go after '--'; see --help)" ;;
    esac
done

cd "$ML8S_ROOT"
use_sandbox_config

# ---------------------------------------------------------------------------------------------
# A registered launch plan, through flytectl: fetch its execution spec, then create the execution.
# ---------------------------------------------------------------------------------------------
if [ -n "$launch_plan" ]; then
    [ $# -eq 0 ] || die "--launch-plan takes no workflow inputs (a launch plan fixes or defaults them)"
    [ -z "${pyflyte_opts[*]:-}" ] || die "--wait and --overwrite-cache apply to the workflow, not to --launch-plan"
    require_cmd flytectl "Install it: curl -sL https://ctl.flyte.org/install | bash"
    spec="$(mktemp "${TMPDIR:-/tmp}/ml8s-exec-spec.XXXXXX")"
    trap 'rm -f "$spec"' EXIT
    say "launching $launch_plan (latest registered version) in $FLYTE_PROJECT/$FLYTE_DOMAIN"
    run_cmd flytectl get launchplan -p "$FLYTE_PROJECT" -d "$FLYTE_DOMAIN" "$launch_plan" --latest --execFile "$spec"
    run_cmd flytectl create execution -p "$FLYTE_PROJECT" -d "$FLYTE_DOMAIN" --execFile "$spec"
    echo "Executions: $(executions_url)"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# The workflow, through pyflyte run --remote.
# --copy all: the task bodies import ml8s modules lazily (the early-exit path must not load torch),
# so uploading only the modules loaded at registration ('auto') would leave those out.
# ---------------------------------------------------------------------------------------------
if [ "$DRY_RUN" != 1 ]; then
    require_venv
fi
load_task_env
log="$(mktemp "${TMPDIR:-/tmp}/ml8s-run.XXXXXX")"
trap 'rm -f "$log"' EXIT

say "launching training_pipeline in $FLYTE_PROJECT/$FLYTE_DOMAIN (images: $FE_IMAGE, $TRAIN_IMAGE)"
cmd=("$PYFLYTE" run --remote --project "$FLYTE_PROJECT" --domain "$FLYTE_DOMAIN" --copy all
    "${IMAGE_ARGS[@]}" "${TASK_ENV_ARGS[@]}" ${pyflyte_opts[@]+"${pyflyte_opts[@]}"}
    workflows/training.py training_pipeline "$@")
if [ "$DRY_RUN" = 1 ]; then
    run_cmd "${cmd[@]}"
    exit 0
fi
# A wide terminal keeps pyflyte's console output (and the URL in it) on one line.
COLUMNS=400 "${cmd[@]}" 2>&1 | tee "$log"

url="$(grep -Eo 'https?://[^ ]*/executions/[A-Za-z0-9-]+' "$log" | tail -n 1 || true)"
echo
if [ -n "$url" ]; then
    echo "Execution: $url"
else
    echo "Execution launched; find it at $(executions_url)"
fi
cat <<EOF
Run it again: the second execution stops at the idempotence gate and returns the same result.
Force a re-run (deletes the marker and artifacts, runs Steps 2-7, records whether the bytes matched;
the launch plan also overwrites Flyte's cache of the compute tasks):
  bash deploy/run.sh --launch-plan training_force_rerun_lp
  # which is:
  flytectl get launchplan -p $FLYTE_PROJECT -d $FLYTE_DOMAIN training_force_rerun_lp --latest --execFile spec.yaml
  flytectl create execution -p $FLYTE_PROJECT -d $FLYTE_DOMAIN --execFile spec.yaml
EOF
