#!/usr/bin/env bash
# Part of scripts/gpu-check.sh (sourced in step mode): the smoke, extend, round, python,
# torch-example, peer-torch and peer-csr steps. Python runs the source tree's package with the extension the build step built
# (py_env in steps-build.sh), as ctest's python.pytest does.
# shellcheck disable=SC2317,SC2034

# junit_counts FILE PREFIX: tests/failed/skipped/passed of a JUnit file (pytest's or gtest's) as
# counts PREFIXtests, ...; echoes "passed/tests".
junit_counts() {
  local f=$1 p=$2 n=0 fl=0 e=0 s=0
  if [ -s "$f" ]; then
    local head
    # The first element with totals: gtest's <testsuites>, pytest's <testsuite> (its <testsuites>
    # root has none).
    head=$(tr '\n\t' '  ' <"$f" | grep -oE '<testsuites? [^>]*>' | grep -m1 ' tests="')
    n=$(echo "$head" | grep -oE ' tests="[0-9]+"' | grep -oE '[0-9]+')
    fl=$(echo "$head" | grep -oE ' failures="[0-9]+"' | grep -oE '[0-9]+')
    e=$(echo "$head" | grep -oE ' errors="[0-9]+"' | grep -oE '[0-9]+')
    s=$(echo "$head" | grep -oE ' (skipped|disabled)="[0-9]+"' | head -1 | grep -oE '[0-9]+')
  fi
  n=${n:-0} fl=$((${fl:-0} + ${e:-0})) s=${s:-0}
  count "${p}tests" "$n"
  count "${p}failed" "$fl"
  count "${p}skipped" "$s"
  count "${p}passed" $((n - fl - s))
  echo "$((n - fl - s))/$n"
}

# pytest_run SECONDS JUNIT ARGS...: pytest under the package's environment, interrupted at
# SECONDS with SIGINT: pytest then stops like on Ctrl-C and still writes its JUnit file with the
# tests it ran (a SIGTERM would lose them); killed 5 s later if it does not stop (torch's
# teardown can take that long after the JUnit file is written).
pytest_run() {
  local seconds=$1 junit=$2
  shift 2
  py_env timeout -s INT -k 5 "$seconds" python3 -m pytest -q -rs -p no:cacheprovider \
    --junitxml="$junit" "$@"
}

# gtest_entries SECONDS TAG ENTRY...: each binary:filter ENTRY's tests on CUDA (at most SECONDS
# each, SMOKE_PROPERTY_CASES), one JUnit file each (logs/TAG-BINARY.xml); the dry run only checks
# that every filter selects tests. Adds to the caller's rc, why, cpp (passed) and cpp_total.
gtest_entries() {
  local seconds=$1 tag=$2 entry
  shift 2
  for entry in "$@"; do
    local bin=$SG_BUILD/tests/${entry%%:*} filter=${entry#*:} n
    [ -x "$bin" ] || { why+=("no ${entry%%:*}"); rc=1; continue; }
    n=$("$bin" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ')
    echo "${entry%%:*} --gtest_filter=$filter: ${n:-0} test(s)"
    [ "${n:-0}" -gt 0 ] || { why+=("${entry%%:*}: '$filter' selects nothing"); rc=1; }
    [ "$SG_DRY" = 1 ] && continue
    banner "${entry%%:*} --gtest_filter=$filter"
    REQUIRE_GPU=1 CUDA_MODULE_LOADING=EAGER SPECGRAPH_PROPERTY_CASES=$SMOKE_PROPERTY_CASES \
      timeout -k 2 "$seconds" "$bin" --gtest_filter="$filter" \
      --gtest_output="xml:$SG_LOGS/$tag-${entry%%:*}.xml" || { why+=("${entry%%:*} failed"); rc=1; }
    local got
    got=$(junit_counts "$SG_LOGS/$tag-${entry%%:*}.xml" "${entry%%_test*}_")
    cpp=$((cpp + ${got%/*})) cpp_total=$((cpp_total + ${got#*/}))
  done
}

# The newest, riskiest paths first, right after the build: the WHILE node and the device counter
# in C++ on CUDA, time_device (the benchmarks' clock), and the torch device-depth tests.
step_smoke() {
  local rc=0 why=() cpp=0 cpp_total=0 t0
  t0=$(date +%s)
  gtest_entries 10 smoke "${SMOKE_CPP[@]}"
  if [ "$SG_DRY" = 1 ]; then
    # The torch part's -k must still name tests (they skip at import without a GPU, so pytest
    # cannot collect them here): pytest's own -k matching over the file's test names.
    local k
    k=$(python3 - "${SMOKE_PYTEST[@]}" <<'PY'
import re, sys
path, expr = sys.argv[1], sys.argv[3]
names = re.findall(r"^def (test_\w+)", open(path).read(), re.M)
words = [w for w in re.split(r"\s+or\s+", expr)]
print(sum(any(w in n for w in words) for n in names))
PY
)
    echo "torch smoke: ${SMOKE_PYTEST[*]} selects ${k:-0} test(s)"
    count torch_selected "${k:-0}"
    [ "${k:-0}" -gt 0 ] || why+=("the torch -k selects nothing")
    [ ${#why[@]} = 0 ] || { note "dry run: smoke selection: ${why[*]}"; return 1; }
    note "skipped (dry run): needs a GPU; the C++ filters and the torch -k select tests"
    exit $EX_SKIP
  fi
  [ -f "$(py_lib)" ] || { note "C++ $cpp/$cpp_total passed; no Python extension built (tvm_ffi missing?)"; return 1; }
  local py left=$((SG_BUDGET - 6 - ($(date +%s) - t0)))
  banner "pytest ${SMOKE_PYTEST[*]} ($left s)"
  pytest_run "$left" "$SG_LOGS/smoke-pytest.xml" "${SMOKE_PYTEST[@]}" ||
    { why+=("torch tests failed"); rc=1; }
  py=$(junit_counts "$SG_LOGS/smoke-pytest.xml" torch_)
  [ "${py#*/}" -gt 0 ] || { why+=("no torch test ran"); rc=1; }
  if [ $rc = 0 ]; then
    note "C++ WHILE/counter/CSR/verify/time_device $cpp/$cpp_total passed; torch device-counter/depth $py passed"
  else
    note "C++ $cpp/$cpp_total, torch $py passed; ${why[*]}"
  fi
  return $rc
}

# The draft-extend phase (issue 30), right after the smoke step: its C++ cuda tests (EXTEND_CPP),
# then its Python GPU files (EXTEND_PYTEST: extend_metadata_ and extend_arena_ on CUDA tensors
# against the independent reference), one JUnit file each. The benchmarks step times it
# (bench_extend) and run-compare checks the main job's extend step.
step_extend() {
  local rc=0 why=() cpp=0 cpp_total=0 t0 f n=0
  t0=$(date +%s)
  gtest_entries "$EXTEND_CPP_SECONDS" extend "${EXTEND_CPP[@]}"
  for f in "${EXTEND_PYTEST[@]}"; do
    [ -f "$f" ] || { why+=("no $f"); rc=1; continue; }
    n=$((n + $(grep -cE '^def test_' "$f")))
  done
  count torch_selected "$n"
  [ "$n" -gt 0 ] || { why+=("${EXTEND_PYTEST[*]} holds no test"); rc=1; }
  if [ "$SG_DRY" = 1 ]; then
    [ ${#why[@]} = 0 ] || { note "dry run: extend selection: ${why[*]}"; return 1; }
    note "skipped (dry run): needs a GPU; the C++ filters select tests, ${EXTEND_PYTEST[*]} holds $n test functions"
    exit $EX_SKIP
  fi
  [ -f "$(py_lib)" ] || { note "C++ $cpp/$cpp_total passed; no Python extension built (tvm_ffi missing?)"; return 1; }
  local py left=$((SG_BUDGET - 6 - ($(date +%s) - t0)))
  banner "pytest ${EXTEND_PYTEST[*]} ($left s)"
  if [ "$left" -lt 5 ]; then
    why+=("no time left for pytest"); rc=1
  else
    pytest_run "$left" "$SG_LOGS/extend-pytest.xml" "${EXTEND_PYTEST[@]}" ||
      { why+=("torch extend tests failed"); rc=1; }
  fi
  py=$(junit_counts "$SG_LOGS/extend-pytest.xml" torch_)
  [ "${py#*/}" -gt 0 ] || { why+=("no torch extend test ran"); rc=1; }
  if [ $rc = 0 ]; then
    note "C++ extend ops/graphs/main-job round $cpp/$cpp_total passed; torch extend $py passed"
  else
    note "C++ $cpp/$cpp_total, torch $py passed; ${why[*]}"
  fi
  return $rc
}

# The round after verify (issue 31), right after the extend step: the cuda instances of the
# device-round graph, the main job's round loop and the acceptance, commit and next-round launchers
# (ROUND_CPP), one JUnit file each (logs/round-*.xml), then the main job's round loop at
# LOOP_BATCHES (logs/round-loop-B.json); C++ only. The benchmarks step times the three chained (bench_round, the round_chain selection)
# and whole rounds against the host-driven ones (bench_device_round, the device_round selection).
step_round() {
  local rc=0 why=() cpp=0 cpp_total=0
  gtest_entries "$ROUND_CPP_SECONDS" round "${ROUND_CPP[@]}"
  if [ "$SG_DRY" = 1 ]; then
    [ ${#why[@]} = 0 ] || { note "dry run: round selection: ${why[*]}"; return 1; }
    note "skipped (dry run): needs a GPU; the C++ filters of ${#ROUND_CPP[@]} binaries select tests"
    exit $EX_SKIP
  fi
  [ "$cpp_total" -gt 0 ] || { why+=("no round test ran"); rc=1; }
  # The main job's round loop on CUDA: both modes verified against float64 and identical.
  local tool=$SG_BUILD/tools/specgraph b loops=0
  for b in "${LOOP_BATCHES[@]}"; do
    local verify=sample
    [ "$b" = 8 ] && verify=all
    banner "specgraph run --rounds-per-launch 8 --max-batch $b --rounds 40 --verify $verify"
    if CUDA_MODULE_LOADING=EAGER "$tool" run --executor cuda --rounds-per-launch 8 --max-batch "$b" \
        --rounds 40 --verify "$verify" --json "$SG_LOGS/round-loop-$b.json" 2>&1 |
        tee "$SG_WORK/round-loop-$b.out" | tail -4 && grep -q ": IDENTICAL$" "$SG_WORK/round-loop-$b.out"; then
      loops=$((loops + 1))
    else
      why+=("round loop at batch $b: $(tail -1 "$SG_WORK/round-loop-$b.out")"); rc=1
    fi
  done
  count round_loops "$loops"
  if [ $rc = 0 ]; then
    note "C++ device round, round loop, accept/commit/next-round cuda $cpp/$cpp_total passed; main job round loop identical and verified at batch ${LOOP_BATCHES[*]}"
  else
    note "C++ $cpp/$cpp_total passed; ${why[*]}"
  fi
  return $rc
}

# pytest over every GPU test file (PYTEST_GPU_GLOB: python/tests/*_cuda.py, found by name, so a
# new one joins by itself) in one call and one JUnit file. The CPU tests run in CI (ctest's
# python.pytest) and are not repeated here: on the GPU machine they only spent its budget (they
# need over 40 s) and made the step read failed. A run cut at the budget reads 'timeout' with
# the counts of the tests that ran (pytest writes its JUnit file on SIGINT).
step_python() {
  local files=() f
  for f in $PYTEST_GPU_GLOB; do  # the extend step's files ran there
    [ -f "$f" ] && [[ " ${EXTEND_PYTEST[*]} " != *" $f "* ]] && files+=("$f")
  done
  if [ "$SG_DRY" = 1 ]; then
    ((${#files[@]})) || { note "dry run: $PYTEST_GPU_GLOB matches no file"; return 1; }
    count gpu_files "${#files[@]}"
    note "skipped (dry run): needs a GPU; would run ${#files[@]} GPU files: $(basename -a "${files[@]}" | paste -sd' ' -)"
    exit $EX_SKIP
  fi
  ((${#files[@]})) || { note "no $PYTEST_GPU_GLOB file"; return 1; }
  [ -f "$(py_lib)" ] || { note "no Python extension built (tvm_ffi missing? see deps.log)"; return 1; }
  count gpu_files "${#files[@]}"
  banner "pytest ${files[*]}"
  local r=0 got
  pytest_run $((SG_BUDGET - 4)) "$SG_LOGS/pytest-gpu-junit.xml" "${files[@]}" || r=$?
  got=$(junit_counts "$SG_LOGS/pytest-gpu-junit.xml" gpu_)
  case $r in
    0) note "${#files[@]} GPU files: $got passed (the CPU tests run in CI)" ;;
    124 | 137)
      note "${#files[@]} GPU files: $got passed before the budget ran out (cut short)"
      exit 124 ;;
    *) note "${#files[@]} GPU files: $got passed; pytest exit $r (see python.log)"; return 1 ;;
  esac
}

step_torch_example() {
  [ -f examples/torch_draft_loop.py ] || { note "skipped: no examples/torch_draft_loop.py"; exit $EX_SKIP; }
  [ "$SG_DRY" = 1 ] && dry_skip
  [ -f "$(py_lib)" ] || { note "no Python extension built"; return 1; }
  local rc=0 mode out=() runner=10 half=$(((SG_BUDGET - 12) / 2))
  for mode in per-step device-depth engine-runner; do
    # 12 rounds, 4 verified against float64: two runs, torch imports and captures in the budget.
    local args=(--rounds 12 --verify-every 3) log=$SG_WORK/example-$mode.out
    local script=examples/torch_draft_loop.py limit=$half unit=step
    [ $mode = device-depth ] && args+=(--device-depth)
    # The engine's own graph runner (docs/engines.md): one graph per batch size, every round
    # of its 12 (3 idle) verified against float64 through the FA3 tables and the CSR indices.
    [ $mode = engine-runner ] &&
      script=examples/engine_runner.py limit=$runner unit=round args=(--device cuda)
    banner "$script ${args[*]}"
    py_env timeout -k 1 "$limit" python3 "$script" "${args[@]}" 2>&1 | tee "$log"
    local r=${PIPESTATUS[0]}
    local err ms
    err=$(grep -oE 'max relative error [0-9.e+-]+' "$log" | awk '{print $4}')
    if [ $mode = engine-runner ]; then  # the larger of its two paths' errors
      err=$(grep -oE '(FA3 tables|CSR indices) [0-9.e+-]+' "$log" | awk '{print $3}' |
        sort -g | tail -1)
    fi
    ms=$(grep -oE "[0-9.]+ ms per $unit" "$log" | awk '{print $1}')
    count "${mode//-/_}_max_relative_error" "${err:-none}"
    count "${mode//-/_}_ms_per_$unit" "${ms:-none}"
    if [ "$r" = 0 ] && grep -q 'PASSED$' "$log"; then
      out+=("$mode PASSED (error ${err:-?}, ${ms:-?} ms/$unit)")
    else
      out+=("$mode FAILED (exit $r)")
      rc=1
    fi
  done
  note "torch_draft_loop.py, engine_runner.py: ${out[*]}"
  return $rc
}

step_peer_torch() {
  [ -f bench/peer_torch.py ] || { note "skipped: no bench/peer_torch.py"; exit $EX_SKIP; }
  [ "$SG_DRY" = 1 ] && dry_skip
  [ -f "$(py_lib)" ] || { note "no Python extension built"; return 1; }
  py_env python3 bench/peer_torch.py --buckets "$PEER_TORCH_BUCKETS" \
    --json "$SG_LOGS/peer-torch.json" || { note "bench/peer_torch.py failed"; return 1; }
  note "bench/peer_torch.py at buckets $PEER_TORCH_BUCKETS: $(tail -1 "$SG_LOGS/peer-torch.log" | cut -c1-100)"
}

# The CSR indices built by a chain of torch ops against bench_csr's cuda kernel on the same cases
# (bench/peer_csr_torch.py; docs/csr.md). The dry run checks that bench_csr has every
# configuration the script asks it for, on the host executor.
step_peer_csr() {
  [ -f bench/peer_csr_torch.py ] || { note "skipped: no bench/peer_csr_torch.py"; exit $EX_SKIP; }
  local bench=$SG_BUILD/bench/bench_csr tool=$SG_BUILD/tools/specgraph c n=0 want=0
  [ -x "$bench" ] || { note "no $bench (build failed?)"; return 1; }
  for c in ${PEER_CSR_CONFIGS//,/ }; do
    IFS=x read -r b k x <<<"$c"
    want=$((want + 2))
    n=$((n + $("$bench" --benchmark_list_tests \
      --benchmark_filter="^csr/host/bucket:$b/topk:$k/ctx:$x/round:(0|1)/" 2>/dev/null | grep -c .)))
  done
  count bench_csr_host_matches "$n"
  [ "$n" = "$want" ] || { note "bench_csr has $n of the $want benchmarks of $PEER_CSR_CONFIGS"; return 1; }
  [ "$SG_DRY" = 1 ] && { note "skipped (dry run): needs a GPU; bench_csr has all $want configurations"; exit $EX_SKIP; }
  py_env timeout -k 2 $((SG_BUDGET - 3)) python3 bench/peer_csr_torch.py --device cuda \
    --configs "$PEER_CSR_CONFIGS" --bench-csr "$bench" --min-time 0.01 --specgraph "$tool" \
    --check-cells "$PEER_CSR_CHECK" --json "$SG_LOGS/peer-csr.json" ||
    { note "bench/peer_csr_torch.py failed: $(tail -1 "$SG_LOGS/peer-csr.log" | cut -c1-100)"; return 1; }
  note "bench/peer_csr_torch.py at $PEER_CSR_CONFIGS: $(tail -1 "$SG_LOGS/peer-csr.log" | cut -c1-100)"
}
