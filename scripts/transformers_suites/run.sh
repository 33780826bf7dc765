#!/usr/bin/env bash
# Run transformers' own test file of one family on plain models and on srformer-converted ones.
#
#   scripts/transformers_suites/run.sh FAMILY [OUT_DIR]
#
# FAMILY: t5, bart, led, longt5, pegasus_x, bigbird_pegasus (tests/models/FAMILY/test_modeling_FAMILY.py).
# OUT_DIR (default runs/transformers-suites): each run writes OUT_DIR/FAMILY/RUN.xml (junit), RUN.log (-rA),
# RUN.stats.json (the plugin's counts) and RUN.time; compare.py then writes OUT_DIR/FAMILY/compare.md.
#
# Environment:
#   RUNS        the runs, space separated: "plain" and VARIANT:SEGMENTS with SEGMENTS "small" (S=2, T=4),
#               "default" (srformer's defaults) or S,T (e.g. srformer:8,16). Default: plain, then every
#               variant of VARIANTS at every SEGMENTS.
#   VARIANTS    default "srformer knn-rows full knn-loki"
#   SEGMENTS    default "small default"
#   TESTS_DIR   the folder fetch_tests.py filled (default runs/transformers-tests)
#   DEPS_DIR    test-only dependencies installed with pip --target (default runs/transformers-tests-deps)
#   TIMEOUT     pytest-timeout seconds per test (default 600; 0 = none)
#   PYTEST_ARGS more pytest arguments (e.g. "-k test_generate")
# RUN_SLOW stays unset, so transformers skips its slow tests. Threads: OMP_NUM_THREADS=1 unless set.
set -uo pipefail

FAMILY=${1:?usage: run.sh FAMILY [OUT_DIR]}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT_DIR=$(realpath -m "${2:-$ROOT/runs/transformers-suites}")
TESTS_DIR=$(realpath -m "${TESTS_DIR:-$ROOT/runs/transformers-tests}")
DEPS_DIR=$(realpath -m "${DEPS_DIR:-$ROOT/runs/transformers-tests-deps}")
VARIANTS=${VARIANTS:-srformer knn-rows full knn-loki}
SEGMENTS=${SEGMENTS:-small default}
TIMEOUT=${TIMEOUT:-600}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
unset RUN_SLOW

TEST_FILE="tests/models/$FAMILY/test_modeling_$FAMILY.py"
[ -f "$TESTS_DIR/$TEST_FILE" ] || { echo "no $TESTS_DIR/$TEST_FILE: run fetch_tests.py first" >&2; exit 2; }

# test-only dependencies of transformers' tests, kept out of the project's venv
if ! PYTHONPATH="$DEPS_DIR" "$PYTHON" -c "import parameterized, timeout_decorator, httpx, pytest_timeout" 2>/dev/null; then
    "$PYTHON" -m pip install -q --target "$DEPS_DIR" --no-deps parameterized timeout-decorator pytest-timeout \
        httpx httpcore certifi || exit 2
fi
# test_pipeline_mixin.py imports transformers from TESTS_DIR/src/transformers (the repository layout)
mkdir -p "$TESTS_DIR/src"
ln -sfn "$("$PYTHON" -c 'import os, transformers; print(os.path.dirname(transformers.__file__))')" \
    "$TESTS_DIR/src/transformers"
# an ini file of its own, so that this project's pytest settings do not apply
[ -f "$TESTS_DIR/pytest.ini" ] || printf '[pytest]\n' > "$TESTS_DIR/pytest.ini"

if [ -z "${RUNS:-}" ]; then
    RUNS=plain
    for v in $VARIANTS; do for s in $SEGMENTS; do RUNS="$RUNS $v:$s"; done; done
fi

mkdir -p "$OUT_DIR/$FAMILY"
for run in $RUNS; do
    unset SRFORMER_SUITE_VARIANT SRFORMER_SUITE_SEGMENT_SIZE SRFORMER_SUITE_TARGET_LENGTH
    if [ "$run" = plain ]; then
        name=plain
    else
        variant=${run%%:*}; seg=${run#*:}; [ "$seg" = "$run" ] && seg=default
        export SRFORMER_SUITE_VARIANT=$variant
        case $seg in
            small) export SRFORMER_SUITE_SEGMENT_SIZE=2 SRFORMER_SUITE_TARGET_LENGTH=4; name=$variant-S2T4 ;;
            default) name=$variant-default ;;
            *,*) export SRFORMER_SUITE_SEGMENT_SIZE=${seg%,*} SRFORMER_SUITE_TARGET_LENGTH=${seg#*,}
                 name=$variant-S${seg%,*}T${seg#*,} ;;
            *) echo "bad segments '$seg' in run '$run'" >&2; exit 2 ;;
        esac
    fi
    base="$OUT_DIR/$FAMILY/$name"
    timeout_args=()
    [ "$TIMEOUT" != 0 ] && timeout_args=(--timeout "$TIMEOUT")
    echo "== $FAMILY $name ($(date -u +%H:%M:%S)): $TEST_FILE"
    start=$(date +%s)
    (
        cd "$TESTS_DIR" &&
        SRFORMER_SUITE_STATS="$base.stats.json" \
        PYTHONPATH="$HERE:$DEPS_DIR${PYTHONPATH:+:$PYTHONPATH}" \
        "$PYTHON" -m pytest -c pytest.ini --rootdir . -p no:cacheprovider -p srformer_suite_plugin \
            -W ignore::pytest.PytestUnknownMarkWarning "${timeout_args[@]}" -rA \
            --junitxml="$base.xml" -o junit_family=xunit1 ${PYTEST_ARGS:-} "$TEST_FILE"
    ) > "$base.log" 2>&1
    rc=$?
    end=$(date +%s)
    echo "$((end - start)) s, pytest exit $rc" > "$base.time"
    echo "   $(tail -n 1 "$base.log")  [$((end - start)) s]"
done

"$PYTHON" "$HERE/compare.py" "$OUT_DIR/$FAMILY" | tee "$OUT_DIR/$FAMILY/compare.md" | head -n 40
