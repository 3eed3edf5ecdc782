#!/usr/bin/env bash
# `make images-smoke`: the images do what the cluster asks of them, checked here with no network.
#  1. the train image runs the training pipeline (pyflyte, locally, --network none) on the demo data: its
#     model_native.safetensors and feature_matrix.parquet must be byte-identical (sha256) to `make run`'s,
#     which the Makefile ran just before into $SMOKE_DIR/outside;
#  2. the fe image runs the Flyte feature task (tasks.features.compute_features) on the same data: the same
#     feature_matrix.parquet again;
#  3. the versions installed in each image are the ones requirements/constraints.txt pins;
#  4. no build secret is in any layer, the config or the history (images/check_layers.py).
# Environment (the Makefile sets it): CONTAINER, FE_IMAGE, TRAIN_IMAGE, SMOKE_DIR, DEMO_DATA, CA_BUNDLE, INDEX_ENV.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${CONTAINER:?}" "${FE_IMAGE:?}" "${TRAIN_IMAGE:?}" "${SMOKE_DIR:?}" "${DEMO_DATA:?}"
failures=0
fail() {
    echo "images-smoke: FAIL: $*" >&2
    failures=$((failures + 1))
}

# The one file of a completed run under a pipeline root (exactly one run expected).
run_file() {
    local matches
    mapfile -t matches < <(find "$1/ml8s_training_runs" -path "*/$2" -type f 2>/dev/null | sort)
    if [ "${#matches[@]}" -ne 1 ]; then
        echo "images-smoke: expected one $2 under $1/ml8s_training_runs, found ${#matches[@]}" >&2
        return 1
    fi
    echo "${matches[0]}"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }

# The layer check saves and reads both images whole (half a minute, most of it the train image): it runs
# beside the checks below, its output kept for the end.
layers_start=$SECONDS
python3 images/check_layers.py --container "$CONTAINER" ${CA_BUNDLE:+--ca-bundle "$CA_BUNDLE"} \
    ${INDEX_ENV:+--index-env "$INDEX_ENV"} "$FE_IMAGE" "$TRAIN_IMAGE" >"$SMOKE_DIR/layers.log" 2>&1 &
layers_pid=$!
trap '[ -z "$layers_pid" ] || kill "$layers_pid" 2>/dev/null || true' EXIT

outside=$SMOKE_DIR/outside
model_out=$(run_file "$outside" model/model_native.safetensors)
features_out=$(run_file "$outside" features/feature_matrix.parquet)
echo "images-smoke: outside  $(sha "$model_out")  model_native.safetensors"
echo "images-smoke: outside  $(sha "$features_out")  feature_matrix.parquet"

# Written by uid 10001 (the images' user) inside: world-writable scratch folders, removed by the next run.
inside=$SMOKE_DIR/train
fe=$SMOKE_DIR/fe
mkdir -p "$inside" "$fe"
chmod 0777 "$inside" "$fe"
run=("$CONTAINER" run --rm --network none -v "$DEMO_DATA:/data:ro" -e DATA_ROOT=/data -e TARGET_COLUMN=churned
    -e ML8S_LOG_LEVEL=WARNING)

start=$SECONDS
"${run[@]}" -v "$inside:/out" -e PIPELINE_ROOT_URI=/out "$TRAIN_IMAGE" \
    pyflyte run workflows/training.py training_pipeline >"$SMOKE_DIR/train.log" 2>&1 ||
    { tail -n 30 "$SMOKE_DIR/train.log" >&2; fail "the training pipeline failed inside $TRAIN_IMAGE"; }
echo "images-smoke: training pipeline inside $TRAIN_IMAGE in $((SECONDS - start))s"
for pair in "model/model_native.safetensors:$model_out" "features/feature_matrix.parquet:$features_out"; do
    name=${pair%%:*}
    if got=$(run_file "$inside" "$name"); then
        echo "images-smoke: train    $(sha "$got")  $(basename "$name")"
        [ "$(sha "$got")" = "$(sha "${pair#*:}")" ] || fail "$name differs inside $TRAIN_IMAGE"
    else
        fail "no $name from the run inside $TRAIN_IMAGE"
    fi
done

start=$SECONDS
"${run[@]}" -v "$fe:/out" -v "$PWD/images/smoke_fe.py:/smoke/smoke_fe.py:ro" -e PIPELINE_ROOT_URI=/out/root -e PYTHONPATH=/app \
    "$FE_IMAGE" python /smoke/smoke_fe.py /out/feature_matrix.parquet >"$SMOKE_DIR/fe.log" 2>&1 ||
    { tail -n 30 "$SMOKE_DIR/fe.log" >&2; fail "the feature task failed inside $FE_IMAGE"; }
echo "images-smoke: feature task inside $FE_IMAGE in $((SECONDS - start))s"
if [ -f "$fe/feature_matrix.parquet" ]; then
    echo "images-smoke: fe       $(sha "$fe/feature_matrix.parquet")  feature_matrix.parquet"
    [ "$(sha "$fe/feature_matrix.parquet")" = "$(sha "$features_out")" ] ||
        fail "feature_matrix.parquet differs inside $FE_IMAGE"
else
    fail "no feature_matrix.parquet from the feature task inside $FE_IMAGE"
fi

# The installed versions against the pins (the images' venvs have no pip: uv lists them).
check_pins() {
    local image=$1
    shift
    if "$CONTAINER" run --rm --network none "$image" "$@" >"$SMOKE_DIR/freeze.txt"; then
        python3 images/check_pins.py requirements/constraints.txt "$SMOKE_DIR/freeze.txt" "$image" ||
            fail "the versions in $image are not the pinned ones"
    else
        fail "could not list the distributions in $image"
    fi
}
check_pins "$FE_IMAGE" uv pip freeze --exclude-editable
check_pins "$TRAIN_IMAGE" uv pip freeze --exclude-editable

layers_rc=0
wait "$layers_pid" || layers_rc=$?
layers_pid=''
cat "$SMOKE_DIR/layers.log"
[ "$layers_rc" -eq 0 ] || fail "build settings found in an image"
echo "images-smoke: layers checked in $((SECONDS - layers_start))s (beside the checks above)"

if [ "$failures" -gt 0 ]; then
    echo "images-smoke: $failures check(s) FAILED" >&2
    exit 1
fi
echo "images-smoke: PASS (byte-equal inside and outside, pinned versions, no build secrets in any layer)"
