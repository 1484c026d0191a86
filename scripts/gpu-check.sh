#!/usr/bin/env bash
# specgraph's GPU check: one script that builds, tests, sanitizes and times specgraph on a GPU
# machine (an H200, sm_90, 16 cores) within 8 minutes, and always leaves a summary.
#
# Usage:
#   scripts/gpu-check.sh [results-dir]            on the GPU machine
#   scripts/gpu-check.sh --dry-run [results-dir]  on a CPU machine (CI): every step that needs no
#                                                 GPU, then a check of the results' contract
#   --only STEP,STEP,...  runs just those steps (the others read 'skipped'), e.g. a rerun of
#                         `--only deps,build,benchmarks` on a warm machine
# results-dir: the argument, else $SPECGRAPH_GPU_RESULTS, else ./gpu-results.
#
# Before a GPU run, on the CPU machine: scripts/bundle-deps.sh (GoogleTest and Google Benchmark as
# binary packages in .deps/debs/, wheels in .whl/, the commit in .gpu-commit). Then, with this
# workplace's device tool:
#   run(command="bash scripts/gpu-check.sh $OUT", carry=[".deps", ".whl", ".gpu-commit"], timeout_s=540)
# The step budgets below add up to at most 8 minutes; timeout_s=540 leaves a minute for the
# machine's kill grace and the packaging.
#
# What lands in results-dir (at most 8 files; the device tool returns no more):
#   summary.txt   the table printed last, then one `answer ID: ...` line per question the run must
#                 answer (scripts/gpu-check/answers.py; docs/gpu-check.md)
#   summary.json  every step: name, status (ok|failed|timeout|skipped|refused), seconds, budget,
#                 note, counts (tests passed/failed/skipped, errors, timings, ...); the answers
#   logs.tar.gz   every step's log, the JUnit files (ctest, smoke, pytest), the run-compare JSON,
#                 bench_NAME.json per benchmark selection, peer-torch.json, peer-csr.json
# Both summaries are rewritten after every step and on exit, INT or TERM, so an interrupted run
# still says how far it got. Exit status: non-zero if a step failed or timed out (and, with
# --dry-run, if the contract check fails). A refused sanitizer or a skipped step is not a failure.
#
# Environment: SPECGRAPH_COMMIT (the commit, when neither git nor .gpu-commit is there),
# SPECGRAPH_GPU_BUILD_DIR (default build-gpu, or build-gpu-dry with --dry-run),
# SPECGRAPH_GPU_JOBS (default: the machine's core count).
# shellcheck disable=SC2317  # the step functions run through "$fn" in step mode
set -uo pipefail

# ---- step budgets, in seconds: the one place to change them ------------------------------------
# Order is execution order: what needs no GPU, then the smoke step (the newest, riskiest paths:
# their signal survives whatever fails later), the extend step (the draft-extend phase) and the round
# step (the round after verify, the newest code), then the rest by value per second, the sanitizers
# (slowest, least likely to finish) last. Sum <= 480 - PACKAGING_RESERVE; the order rules and the
# sum are checked at start and by the contract (scripts/gpu-check/contract.py).
STEPS=(machine deps build smoke extend round tests run-compare python torch-example benchmarks
  peer-torch peer-csr memcheck initcheck)
declare -A BUDGET=(
  [machine]=15        # three nvidia-smi calls: the first on a cold machine starts the driver's
                      # persistence (seconds); tool versions ~1 s
  [deps]=35           # unpack .deps/debs + a link probe ~10 s (+25 s if GoogleTest must be
                      # rebuilt); tvm_ffi's wheel installed offline ~3 s
  [build]=90          # ~400 CPU-s of compiles (CUDA kernels, tests, benchmarks, the Python
                      # extension), the longest nvcc ~25 s: ~40-60 s on 16 cores; with a carried
                      # prebuilt tree (.prebuilt, docs/gpu-check.md) a few seconds
  [smoke]=40          # WHILE-node, device-counter, CSR, verify and executor-event C++ tests on
                      # CUDA (~10 s, each binary at most 10 s), the torch device-depth tests:
                      # torch import + CUDA context ~8 s
  [extend]=25         # the draft-extend phase, the newest code: its three C++ binaries' cuda
                      # tests (each at most 8 s), then python/tests/test_extend_cuda.py (a
                      # torch import + CUDA context ~8 s, 100 small rounds)
  [round]=34          # the round after verify (issue 31): the device-round graph's (fixed and
                      # device depth) and the round loop's cuda tests first, then acceptance,
                      # commit and next round (seven
                      # binaries, each cut at ROUND_CPP_SECONDS; no torch): a CUDA context ~1 s
                      # and a few s of small cases each; then the main job's round loop at the
                      # LOOP_BATCHES, ~2 s each (all estimated, not measured)
  [tests]=45          # every ctest test (not python.pytest), cuda instances included
  [run-compare]=13    # two small seeded simulated runs (both formats), a few seconds each
  [python]=27         # pytest over every python/tests/*_cuda.py but the extend step's, in one
                      # call (the CPU rest runs in CI): one torch import, ~20 s of tests
  [torch-example]=30  # examples/torch_draft_loop.py, per-step then --device-depth: two torch
                      # imports (~3 s each), captures, 12 rounds each; examples/engine_runner.py
                      # (10 s of it: a torch import, 4 graphs, 12 rounds)
  [benchmarks]=55     # the selection in BENCH_RUNS (~126 cuda benchmarks at min_time 0.005 s)
  [peer-torch]=10     # bench/peer_torch.py at buckets 1, 64, 256
  [peer-csr]=15       # bench/peer_csr_torch.py: torch import ~3 s, the chain at 3 configurations
                      # eager and as graphs, bench_csr's 6 of them, one output check via the CLI
  [memcheck]=18       # cuda tests of the binaries that have some, newest first (the round
                      # binaries), 4 at a time
  [initcheck]=13      # same, initcheck
)
PACKAGING_RESERVE=15  # summaries + archive, and the 5 s kill grace after a timed-out step
TOTAL_LIMIT=480
SMOKE_LIMIT=40        # the smoke step's budget may not grow past this (the contract checks it)
# The dry run builds on a small CPU machine: only these budgets differ there (the sanitizer
# steps list every test binary, measured at 29 s on a loaded 2-core machine, 3 s when idle).
declare -A DRY_BUDGET=([deps]=120 [build]=2400 [run-compare]=120 [memcheck]=120 [initcheck]=120)
PER_TEST_TIMEOUT=60   # ctest --timeout for one test
PROPERTY_CASES=20     # SPECGRAPH_PROPERTY_CASES under compute-sanitizer (a 10-100x slowdown)
# gtest filter under compute-sanitizer: the cuda instances (and CudaHandles.*, CudaInterop.*),
# without the tests that assert on timing a sanitizer's slowdown breaks: time_device, and the
# interop tests that expect "not ready" right after a 40 ms spin (StageReturns*, *WaitsFor*).
# Only binaries listing a test for it run, the newest test files first (scripts/bundle-deps.sh
# writes their ages to .deps/test-ages). compute-sanitizer runs with --report-api-errors no: a
# test provokes a failed cudaMalloc on purpose, and an API error is not a memory error.
SANITIZER_FILTER='*cuda*:*Cuda*-*TimeDevice*:*StageReturns*:*WaitsFor*'
# The smoke step's C++ part, binary:gtest filter (the newest CUDA paths: WHILE node, device
# counter, the WHILE round's iteration limit, the CSR indices kernel and its round operations, the
# verify metadata kernels and their captured graph, and time_device, which the benchmarks rely
# on), and executor_events_test: the event edges inside one capture and across it, the WHILE
# body's stream made before any capture (a first begin_while inside the engine's global-mode
# capture), the refused in-place update of a re-captured WHILE graph. The tests step runs them
# again with everything else, at their full case counts.
SMOKE_CPP=("device_steps_test:Executors/DeviceSteps.*/cuda" "round_limits_test:Executors/RoundLimits.*/cuda"
           "kv_indices_test:Executors/KvIndices.*/cuda" "csr_ops_test:Executors/CsrOps.*/cuda"
           "verify_test:Executors/VerifyMetadata.*/cuda" "verify_graph_test:Executors/VerifyGraph.*/cuda"
           "executor_test:*TimeDevice*cuda*" "executor_events_test:Executors/*/cuda:CudaCaptureEdges.*")
SMOKE_PROPERTY_CASES=200  # SPECGRAPH_PROPERTY_CASES of the smoke's C++ runs (random-case tests)
# ... and its torch part: the DraftGraphs device-counter and device-depth tests on the GPU.
SMOKE_PYTEST=(python/tests/test_torch_cuda.py -k "device_counter or device_decide_the_depth")
# The extend step (issue 30, the draft-extend phase): binary:gtest filter of its CUDA tests (the
# metadata over the arena or the engine's tensors, the per-bucket extend graphs, the main job's
# extend round; extend_metadata_test is host-only), at SMOKE_PROPERTY_CASES, each at most
# EXTEND_CPP_SECONDS, then the Python files (the python step leaves them out).
EXTEND_CPP=("extend_ops_test:Executors/ExtendOps.*/cuda" "runtime_extend_test:Executors/RuntimeExtend.*/cuda"
            "sim_extend_round_test:Executors/SimExtendRound.*/cuda")
EXTEND_CPP_SECONDS=8
EXTEND_PYTEST=(python/tests/test_extend_cuda.py)
# The round step (issue 31, the round after verify): binary:gtest filter of the cuda instances of
# the acceptance, commit and next-round launchers with every buffer in executor memory (random
# trees, one output short in some, the device real-batch word; the commit's examples; the next
# round's examples and random rounds with the ring), at SMOKE_PROPERTY_CASES, each at most
# ROUND_CPP_SECONDS. The benchmarks step times the three chained (bench_round).
ROUND_CPP=("device_round_test:Executors/DeviceRound.*/cuda"
           "device_round_depth_test:Executors/DeviceRoundDepth.*/cuda"
           "round_loop_test:Executors/RoundLoop.*/cuda"
           "accept_test:Executors/AcceptExecutors.*/cuda" "commit_test:Executors/CommitOnExecutor.*/cuda"
           "commit_random_test:Executors/CommitRandomOnExecutor.*/cuda"
           "next_round_test:Executors/NextRoundExecutor.*/cuda")
ROUND_CPP_SECONDS=5
# Then the main job's round loop (specgraph run --rounds-per-launch 8, docs/main-job.md "The round
# loop") on CUDA at these batches (--max-batch), 40 rounds each, every round verified at batch 8,
# every tenth at the others; logs/round-loop-B.json each, the round answer's host and wall us per
# round of both modes.
LOOP_BATCHES=(1 8 16 64)
# The benchmarks that answer the run's questions (docs/gpu-check.md), one program
# run each with its own JSON (logs/bench_NAME.json): NAME|program|--benchmark_filter regex. The
# newest first (bench_device_round: K = 16 whole rounds as one launch_device_rounds against the
# same rounds driven from the host, rounds/s and GPU idle per round, 16 cases; bench_round:
# acceptance, commit and next round chained, 20 cases; bench_extend: one run_extend_metadata at
# 6 cases), so a slow older one cannot starve them.
BENCH_RUNS=(
  "device_round|bench_device_round|^device_round/(device_loop|host_loop)/cuda/bucket:(1|4|16|64)/(topk:1/page_size:1|topk:4/page_size:16)/"
  "round_chain|bench_round|^round/cuda/bucket:(1|4|16|64|256)/topk:(1|4)/page_size:(1|16)/"
  "extend|bench_extend|^extend/cuda/bucket:(1|64|256)/W:8/page_size:(1|64)/M:4096/path:0/"
  "expand|bench_metadata|^expand/(fused|multipass)/cuda/bucket:(1|64|256)/topk:8/page_size:16/step:(0|4)/"
  "capture_table|bench_graphs|^lifecycle/capture_table/[a-z_]+/cuda/"
  "step_time|bench_graphs|^replay/step_device_time/(graph|eager)/cuda/bucket:(1|64|256)/step:(0|4)/"
  "round|bench_graphs|^replay/(round_device_time|stage_and_round)/[a-z_]+/cuda/bucket:(1|64|256)/"
  "throughput|bench_throughput|^draft_step/(graph|eager)/cuda/bucket:(1|64|256)/step:(0|4)/"
  "csr|bench_csr|^csr/cuda/bucket:(8|64|256)/topk:8/ctx:4096/round:(0|1)/"
  "verify|bench_verify|^verify/cuda/bucket:(1|64|256)/D:(8|64)/page_size:(1|16)/ctx:4096/layout:(0|1)/"
)
BENCH_MIN_TIME=0.005
# The Python step's pytest selection: every GPU test file, found by name (a new *_cuda.py joins
# by itself); the CPU tests run in CI and are not repeated here.
PYTEST_GPU_GLOB='python/tests/*_cuda.py'
PEER_TORCH_BUCKETS=1,64,256
# bench/peer_csr_torch.py's configurations (bucket x topk x ctx; bench_csr has each of them), the
# first one also checked against `specgraph metadata kv-indices` (its cells <= PEER_CSR_CHECK).
PEER_CSR_CONFIGS=8x8x4096,64x8x4096,256x8x4096
PEER_CSR_CHECK=2000000
# The run-compare configuration: small, seeded, every round verified against float64, both
# attention paths (FA3 tables and CSR indices), each verified and compared with the other.
RUN_CONFIG=(--max-batch 8 --topk 4 --steps 5 --page-size 16 --heads 4 --head-dim 64
  --max-context 256 --rounds 40 --seed 20261130 --verify all --format both)

EX_SKIP=77     # a step's exit status for 'skipped'
EX_REFUSED=78  # ... and for 'refused' (the machine refused a tool: e.g. compute-sanitizer)

cd "$(dirname "$0")/.." || exit 2
SELF=$PWD/scripts/gpu-check.sh
if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null 2>&1; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# ---- step mode: `gpu-check.sh --step NAME` (what the main loop runs under `timeout`) ------------
if [ "${1:-}" = --step ]; then
  SG_STEP=$2
  export SG_STEP
  cd "$SG_ROOT" || exit 1
  # shellcheck source=/dev/null
  source "$SG_ROOT/scripts/gpu-check/steps-build.sh"
  # shellcheck source=/dev/null
  source "$SG_ROOT/scripts/gpu-check/steps-run.sh"
  # shellcheck source=/dev/null
  source "$SG_ROOT/scripts/gpu-check/steps-python.sh"
  fn=step_${SG_STEP//-/_}
  "$fn"
  exit $?
fi

# =================================================================================================
# Main
# =================================================================================================
SG_DRY=0
results=""
ONLY=""
while (($#)); do
  a=$1
  shift
  case $a in
    --dry-run) SG_DRY=1 ;;
    --only) ONLY=,${1:-},; shift ;;
    --only=*) ONLY=,${a#--only=}, ;;
    -h | --help) sed -n '2,/^# shellcheck/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option '$a'" >&2; exit 2 ;;
    *) results=$a ;;
  esac
done
for s in ${ONLY//,/ }; do
  [[ " ${STEPS[*]} " == *" $s "* ]] || { echo "gpu-check.sh: --only: no step '$s'" >&2; exit 2; }
done
results=${results:-${SPECGRAPH_GPU_RESULTS:-./gpu-results}}
mkdir -p "$results" || exit 2
results=$(cd "$results" && pwd)

budget_sum=0
for s in "${STEPS[@]}"; do budget_sum=$((budget_sum + BUDGET[$s])); done
# The plan's rules (the same check the contract makes on summary.json): order and budgets.
plan_args=(--limit "$TOTAL_LIMIT" --reserve "$PACKAGING_RESERVE" --smoke-limit "$SMOKE_LIMIT")
for s in "${STEPS[@]}"; do plan_args+=("$s=${BUDGET[$s]}"); done
if ! python3 scripts/gpu-check/contract.py --plan "${plan_args[@]}" >&2; then
  echo "gpu-check.sh: the step plan breaks the contract (order or budgets above)" >&2
  exit 2
fi

# The commit: SPECGRAPH_COMMIT, else git (when the copy has its metadata), else .gpu-commit.
SG_COMMIT=unknown SG_COMMIT_DESCRIBE=unknown SG_COMMIT_SOURCE=none
if [ -n "${SPECGRAPH_COMMIT:-}" ]; then
  SG_COMMIT=$SPECGRAPH_COMMIT SG_COMMIT_DESCRIBE=$SPECGRAPH_COMMIT SG_COMMIT_SOURCE=SPECGRAPH_COMMIT
elif git rev-parse HEAD >/dev/null 2>&1; then
  SG_COMMIT=$(git rev-parse HEAD) SG_COMMIT_DESCRIBE=$(git describe --always --dirty) SG_COMMIT_SOURCE=git
elif [ -s .gpu-commit ]; then
  SG_COMMIT=$(sed -n 1p .gpu-commit) SG_COMMIT_DESCRIBE=$(sed -n 2p .gpu-commit)
  SG_COMMIT_SOURCE=.gpu-commit
fi
SG_COMMIT_DESCRIBE=${SG_COMMIT_DESCRIBE:-$SG_COMMIT}

SG_ROOT=$PWD
SG_JOBS=${SPECGRAPH_GPU_JOBS:-$(nproc)}
if [ $SG_DRY = 1 ]; then SG_BUILD=${SPECGRAPH_GPU_BUILD_DIR:-build-gpu-dry}; else SG_BUILD=${SPECGRAPH_GPU_BUILD_DIR:-build-gpu}; fi
SG_BUILD=$(mkdir -p "$SG_BUILD" && cd "$SG_BUILD" && pwd)
SG_WORK=$(mktemp -d "${TMPDIR:-/tmp}/specgraph-gpu-check.XXXXXX")
SG_LOGS=$SG_WORK/logs
mkdir -p "$SG_LOGS" "$SG_WORK/notes" "$SG_WORK/counts"
export SG_ROOT SG_DRY SG_JOBS SG_BUILD SG_WORK SG_LOGS SG_COMMIT SG_COMMIT_DESCRIBE SG_COMMIT_SOURCE
mkdir -p "$SG_WORK/status"
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T0=$(date +%s)
declare -A STATUS SECONDS_TAKEN EXIT_CODE
INTERRUPTED=""
CHILD=""
FINALIZED=0

# Our own files only: the results folder must stay within the device tool's 8 files.
rm -f "$results/summary.txt" "$results/summary.json" "$results/logs.tar.gz"

# shellcheck source=/dev/null
source "$PWD/scripts/gpu-check/summary.sh"

eff_budget() {
  if [ $SG_DRY = 1 ] && [ -n "${DRY_BUDGET[$1]:-}" ]; then echo "${DRY_BUDGET[$1]}"; else echo "${BUDGET[$1]}"; fi
}

finalize() {
  [ $FINALIZED = 1 ] && return
  FINALIZED=1
  write_summaries 1
}

on_signal() {
  INTERRUPTED=$1
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
}
on_exit() {
  local rc=$?
  if [ $FINALIZED = 0 ]; then
    finalize
    cat "$results/summary.txt"
    rm -rf "$SG_WORK"
  fi
  exit $rc
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap on_exit EXIT

run_step() {
  local s=$1 b t0 rc
  b=$(eff_budget "$s")
  t0=$(date +%s)
  echo "== $s (budget ${b} s) ..."
  local nice=()
  [ $SG_DRY = 1 ] && nice=(nice -n 10)
  SG_BUDGET=$b "${nice[@]}" timeout -k 5 "$b" "$BASH" "$SELF" --step "$s" </dev/null \
    >"$SG_LOGS/$s.log" 2>&1 &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  while kill -0 "$CHILD" 2>/dev/null; do wait "$CHILD"; rc=$?; done
  CHILD=""
  SECONDS_TAKEN[$s]=$(($(date +%s) - t0))
  EXIT_CODE[$s]=$rc
  if [ -n "$INTERRUPTED" ]; then
    STATUS[$s]=failed
    echo "interrupted by SIG$INTERRUPTED after ${SECONDS_TAKEN[$s]} s" >"$SG_WORK/notes/$s"
  else
    case $rc in
      0) STATUS[$s]=ok ;;
      124 | 137) STATUS[$s]=timeout
        echo "timed out after ${b} s$( [ -s "$SG_WORK/notes/$s" ] && echo "; $(step_note "$s")")" >"$SG_WORK/notes/$s.t"
        mv "$SG_WORK/notes/$s.t" "$SG_WORK/notes/$s" ;;
      "$EX_SKIP") STATUS[$s]=skipped ;;
      "$EX_REFUSED") STATUS[$s]=refused ;;
      *) STATUS[$s]=failed
        [ -s "$SG_WORK/notes/$s" ] || echo "exit status $rc (see logs/$s.log)" >"$SG_WORK/notes/$s" ;;
    esac
  fi
  echo "== $s: ${STATUS[$s]} (${SECONDS_TAKEN[$s]} s) $(step_note "$s")"
}

echo "specgraph GPU check$([ $SG_DRY = 1 ] && echo ' (dry run)'): commit $SG_COMMIT_DESCRIBE, $SG_JOBS jobs, build in $SG_BUILD, results in $results"
for s in "${STEPS[@]}"; do
  [ -n "$INTERRUPTED" ] && break
  if [ -n "$ONLY" ] && [[ $ONLY != *",$s,"* ]]; then
    STATUS[$s]=skipped SECONDS_TAKEN[$s]=0
    echo "skipped: not selected (--only)" >"$SG_WORK/notes/$s"
    : >"$SG_LOGS/$s.log"
    continue
  fi
  run_step "$s"
  write_summaries 0
done

finalize
OVERALL_RC=$OVERALL
CONTRACT=""
if [ $SG_DRY = 1 ]; then
  if python3 scripts/gpu-check/contract.py --dry-run "$results" >"$SG_WORK/contract.txt" 2>&1; then
    CONTRACT="contract: OK ($(tail -1 "$SG_WORK/contract.txt"))"
  else
    CONTRACT="contract: FAILED"$'\n'"$(cat "$SG_WORK/contract.txt")"
    OVERALL_RC=1
  fi
fi
[ -n "$INTERRUPTED" ] && OVERALL_RC=1
echo
cat "$results/summary.txt"
[ -n "$CONTRACT" ] && echo "$CONTRACT"
rm -rf "$SG_WORK"
trap - EXIT
exit $OVERALL_RC

