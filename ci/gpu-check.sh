#!/usr/bin/env bash
# Verify a GPU machine in one command: environment, GPU and CUDA facts, the GPU
# tests, the suites at the full workload with the CI gate, and per-op device
# times in events mode against sync mode.
#
#   OUT=/some/dir bash ci/gpu-check.sh        # from the repository root
#
# Needs one NVIDIA GPU, Python >= 3.10 and PyPI. Every step has a timeout and
# its own log in $OUT; a failed step never stops the ones after it; the whole
# run keeps within BUDGET seconds (default 520: under 9 minutes). The exit
# status is 1 when a gating step failed (install, GPU tests, suites and gate).
# The GPU's settings are only read (nvidia-smi queries, NVML), never changed.
#
# Environment:
#   OUT             where logs and results go (default ./gpu-check-out)
#   BUDGET          seconds for the whole run (default 520)
#   BENCH_MAX_TIME  pytest-benchmark's --benchmark-max-time per per-op case (default 0.2)
#   PYTHON          the interpreter for the environment (default python3)
#   VENV            the environment's directory (default .gpu-check-venv; reused when it works)
#   COMPARE         a git revision (or a checkout's directory): the suites run A/B against it,
#                   base and head interleaved (--opperf-compare), with a longer timeout
#   GPU_CHECK_DRY=1 the same steps on the CPU with the current python, tiny workload, no
#                   install: a check of the script itself on a machine without a GPU
set -u -o pipefail

OUT=${OUT:-$PWD/gpu-check-out}
BUDGET=${BUDGET:-520}
BENCH_MAX_TIME=${BENCH_MAX_TIME:-0.2}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-$PWD/.gpu-check-venv}
DRY=${GPU_CHECK_DRY:-0}
COMPARE=${COMPARE:-}
COMPARE_ARGS=()
SUITES_TIMEOUT=300
if [[ -n "$COMPARE" ]]; then
  COMPARE_ARGS=("--opperf-compare=$COMPARE")
  SUITES_TIMEOUT=750  # A/B takes at most 2.5 times the single-side run
fi
START=$(date +%s)
FAILED_GATING=0

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STEPS="$OUT/steps.tsv"
printf 'step\tstatus\tseconds\tgating\n' > "$STEPS"

if [[ "$DRY" == 1 ]]; then
  DEVICE=cpu
  WORKLOAD=tiny
  PY=$(command -v "$PYTHON")
  BENCH_ARGS=(--benchmark-max-time=0.002 --benchmark-min-rounds=2)
  # The GPU machine's environment (the gpu and test extras) has no paddle, so its suites skip
  # suites/paddle; the current python may have it (.ci/run installs it): the same suites here.
  SUITE_ARGS=(--ignore=suites/paddle)
else
  DEVICE=gpu
  WORKLOAD=full
  PY="$VENV/bin/python"
  BENCH_ARGS=("--benchmark-max-time=$BENCH_MAX_TIME")
  SUITE_ARGS=()
fi

left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME GATING SECONDS COMMAND...: run COMMAND under a timeout (SIGINT first, so
# pytest still writes its report and files), its output in $OUT/NAME.log.
step() {
  local name=$1 gating=$2 want=$3
  shift 3
  local limit rc began status
  limit=$(left)
  ((limit > want)) && limit=$want
  began=$(date +%s)
  if ((limit < 10)); then
    status="skipped (out of time)"
    rc=0
  else
    echo "=== $name (timeout ${limit}s, $(left)s of the budget left)"
    timeout -s INT -k 15 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    case $rc in
      0) status=ok ;;
      124 | 137) status="timed out after ${limit}s" ;;
      *) status="failed (exit status $rc)" ;;
    esac
    tail -n 25 "$OUT/$name.log"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(($(date +%s) - began))" "$gating" >> "$STEPS"
  echo "--- $name: $status"
  if [[ "$gating" == yes && "$status" != ok ]]; then
    FAILED_GATING=1
  fi
  return 0
}

# --- 1. the machine and the GPU, as the driver reports them (queries only) -------------
step host-facts no 60 env PYTHON="$PYTHON" bash -s <<'SH'
date -u
uname -a
echo "cores: $(nproc)"
free -g 2> /dev/null || true
command -v "$PYTHON" && "$PYTHON" --version
if command -v nvidia-smi > /dev/null; then
  nvidia-smi
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu,ecc.mode.current,mig.mode.current,persistence_mode,clocks_throttle_reasons.active --format=csv
else
  echo "nvidia-smi: not found"
fi
if command -v nvcc > /dev/null; then nvcc --version; else echo "nvcc: not found (not needed: the gpu extra brings NVRTC)"; fi
SH

# --- 2. an environment with the gpu and test extras -------------------------------------
if [[ "$DRY" == 1 ]]; then
  echo "dry run: using $PY, nothing installed"
elif "$PY" -c 'import cupy, pytest_opperf, xdist, scipy' > /dev/null 2>&1; then
  echo "reusing $VENV"
else
  step venv yes 90 bash -c "rm -rf '$VENV' && '$PYTHON' -m venv '$VENV' && '$VENV/bin/python' -m pip install --progress-bar off -q --upgrade pip"
  step install yes 240 "$PY" -m pip install --progress-bar off -e '.[gpu,test]'
fi
step pip-freeze no 30 "$PY" -m pip freeze

# --- 3. CUDA as cupy and the framework see it; NVML through the plugin -------------------
step cuda-facts no 90 "$PY" - <<'PY'
from reference_framework import backend
from pytest_opperf.gpu import gpu_env

cp = backend.cupy_or_none()
print("cupy:", getattr(cp, "__version__", None))
print("usable GPU:", backend.gpu_available(), "|", backend.gpu_unavailable_reason() or "compiled and ran a probe kernel")
if backend.gpu_available():
    print("devices:", backend.gpu_count())
    place = backend.CUDAPlace(0)
    print("device:", backend.device_name(place), backend.device_facts(place))
    print("NVML:", gpu_env.snapshot(backend.pci_bus_id(place)))
    cp.show_config()
PY

# --- 4. the GPU tests -----------------------------------------------------------------------
step gpu-tests yes 150 "$PY" -m pytest tests/ -m gpu -q -rs -p no:cacheprovider -o faulthandler_timeout=120 \
  --junitxml="$OUT/gpu-tests.xml"

# --- 5. the suites with the CI gate, as the GPU workflow gates ---------------------------
step suites yes "$SUITES_TIMEOUT" "$PY" -m pytest suites/ "${SUITE_ARGS[@]}" -q -p no:cacheprovider --opperf "--opperf-device=$DEVICE" \
  "--opperf-workload=$WORKLOAD" --opperf-thresholds=ci/thresholds.toml --opperf-baseline=ci/baselines \
  "--opperf-json=$OUT/results.json" "--opperf-markdown=$OUT/report.md" "--opperf-trace=$OUT/trace.json" \
  "${BENCH_ARGS[@]}" "${COMPARE_ARGS[@]}" --junitxml="$OUT/suites.xml"

# --- 6. per-op device times: events (the suites' run) against sync ------------------------
# (its markdown stays out of the job summary, which is the gate's report)
step ops-sync no 150 env -u GITHUB_STEP_SUMMARY "$PY" -m pytest suites/test_ops.py -q -p no:cacheprovider --opperf "--opperf-device=$DEVICE" \
  "--opperf-workload=$WORKLOAD" --opperf-timing=sync "--opperf-json=$OUT/ops-sync.json" "${BENCH_ARGS[@]}"
step timing-agreement no 30 "$PY" ci/timing_agreement.py "$OUT/results.json" "$OUT/ops-sync.json" \
  --tolerance 0.05 --markdown "$OUT/timing-agreement.md"

# --- 7. the GPU after the run ----------------------------------------------------------------
if command -v nvidia-smi > /dev/null; then
  step gpu-after no 30 nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv
fi

echo "=== summary ($(($(date +%s) - START))s of ${BUDGET}s; logs and results in $OUT)"
column -t -s $'\t' "$STEPS" 2> /dev/null || cat "$STEPS"
grep -h -E "examples/sec|^gate: |agree within" "$OUT/suites.log" "$OUT/timing-agreement.log" 2> /dev/null
exit "$FAILED_GATING"
