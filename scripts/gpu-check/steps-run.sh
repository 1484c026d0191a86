#!/usr/bin/env bash
# Part of scripts/gpu-check.sh (sourced in step mode): the run-compare, sanitizer and benchmark steps.
# shellcheck disable=SC2317,SC2034

step_run_compare() {
  local tool=$SG_BUILD/tools/specgraph
  [ -x "$tool" ] || { note "no $tool (build failed?)"; return 1; }
  # executor:report name. The dry run has no GPU: it compares host with host, which exercises the
  # comparison itself.
  local runs=(cuda:cuda host:host)
  [ "$SG_DRY" = 1 ] && runs=(host:host host:host2)
  local rc=0 r why=""
  for r in "${runs[@]}"; do
    banner "specgraph run --executor ${r%%:*} ${RUN_CONFIG[*]}"
    # The text report too (run-NAME.out): the compare below wants its PASSED/AGREE lines.
    CUDA_MODULE_LOADING=EAGER "$tool" run --executor "${r%%:*}" "${RUN_CONFIG[@]}" --json "$SG_LOGS/run-${r#*:}.json" \
      2>"$SG_WORK/run-compare.err" | tee "$SG_WORK/run-${r#*:}.out"
    [ "${PIPESTATUS[0]}" = 0 ] || { rc=1; why+="${r%%:*} run: $(tail -1 "$SG_WORK/run-compare.err"); "; }
    cat "$SG_WORK/run-compare.err"
  done
  banner compare
  python3 - "$SG_LOGS/run-${runs[0]#*:}.json" "$SG_LOGS/run-${runs[1]#*:}.json" \
    "$SG_WORK/counts/$SG_STEP" "$SG_WORK/run-${runs[0]#*:}.out" "$SG_WORK/run-${runs[1]#*:}.out" <<'EOF' || rc=1
import json, re, sys
pa, pb, counts, oa, ob = sys.argv[1:6]
try:
    a, b = json.load(open(pa)), json.load(open(pb))
except Exception as e:  # a run failed before writing its report
    print(f"cannot read both reports: {e}")
    sys.exit(1)
problems = []
# Every phase's checks as the text report states them (RUN_CONFIG has --format both): the draft
# steps, the verify step and the draft-extend step (issue 30), each PASSED, fa3 and csr AGREE.
LINES = [r"verification: .*: PASSED", r"fa3 vs csr: .*: AGREE", r"verify step: .*: PASSED",
         r"verify step fa3 vs csr: .*: AGREE", r"extend step: .*: PASSED",
         r"extend step fa3 vs csr: .*: AGREE"]
for r, path in ((a, oa), (b, ob)):
    try:
        text = open(path).read()
    except OSError as e:
        problems.append(f"{r['executor']}: no text report ({e})")
        continue
    for want in LINES:
        if not re.search(rf"^{want}$", text, re.M):
            problems.append(f"{r['executor']}: no '{want}' line")
# The extend step in the JSON: every round verified on every path, within the tolerance, fa3
# compared with csr; its host-decided work equal across the two runs.
for r in (a, b):
    x, tol = r.get("extend_step"), r["verification"]["tolerance"]
    if not x:
        problems.append(f"{r['executor']}: no extend_step in the report")
        continue
    if x["verified_rounds"] != r["rounds"] or x["steps"] != r["rounds"]:
        problems.append(f"{r['executor']} extend step: {x['steps']} steps, {x['verified_rounds']}"
                        f" verified of {r['rounds']} rounds")
    worst = max(x["max_relative_error_fa3"], x["max_relative_error_full"],
                x["max_relative_error_prefix"])
    if worst > tol or x["max_relative_difference"] > tol or x["agreement_outputs"] <= 0:
        problems.append(f"{r['executor']} extend step: error {worst}, fa3 vs csr "
                        f"{x['max_relative_difference']} over {x['agreement_outputs']} outputs")
xa, xb = a.get("extend_step") or {}, b.get("extend_step") or {}
for key in ("steps", "requests", "window_tokens"):
    if xa.get(key) != xb.get(key):
        problems.append(f"extend step {key}: {xa.get(key)} vs {xb.get(key)}")
for r in (a, b):
    v = r["verification"]
    if not v.get("passed") or v["max_relative_error"] > v["tolerance"]:
        problems.append(f"{r['executor']} failed verification")
    if v["rounds"] != r["rounds"]:
        problems.append(f"{r['executor']} verified {v['rounds']} of {r['rounds']} rounds")
# Same seed, same configuration: the plan and the work (rounds, replays, draft tokens per step)
# are decided on the host and must be identical; only the float32 outputs may differ (tolerance).
ca, cb = dict(a["config"]), dict(b["config"])
if ca != cb: problems.append(f"configs differ: {ca} vs {cb}")
if a["plan"] != b["plan"]: problems.append("plans differ")
for key in ("rounds", "replays"):
    if a[key] != b[key]: problems.append(f"{key}: {a[key]} vs {b[key]}")
sa = [(s["step"], s["replays"], s["draft_tokens"]) for s in a["steps"]]
sb = [(s["step"], s["replays"], s["draft_tokens"]) for s in b["steps"]]
if sa != sb: problems.append("per-step replays/draft tokens differ")
with open(counts, "a") as f:
    for r, tag in ((a, "a"), (b, "b")):
        e = r["executor"] if a["executor"] != b["executor"] else r["executor"] + "_" + tag
        f.write(f"{e}_max_relative_error={r['verification']['max_relative_error']:.3e}\n")
        f.write(f"{e}_run_seconds={r['run_seconds']:.4f}\n")
        f.write(f"{e}_capture_seconds={r['capture']['total_seconds']:.4f}\n")
        x = r.get("extend_step") or {}
        if x:
            f.write(f"{e}_extend_max_relative_error={max(x['max_relative_error_fa3'], x['max_relative_error_full'], x['max_relative_error_prefix']):.3e}\n")
            f.write(f"{e}_extend_fa3_vs_csr={x['max_relative_difference']:.3e}\n")
            f.write(f"{e}_extend_accepted={x['accepted']}\n")
    if xa:
        f.write(f"extend_rounds={xa['verified_rounds']}\nextend_window_tokens={xa['window_tokens']}\n")
    f.write(f"tolerance={a['verification']['tolerance']:.1e}\n")
    f.write(f"rounds={a['rounds']}\n")
    if a["run_seconds"] > 0 and a["executor"] != b["executor"]:
        f.write(f"host_over_{a['executor']}_time={b['run_seconds'] / a['run_seconds']:.2f}\n")
for p in problems: print("MISMATCH:", p)
print("reports agree" if not problems else f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
EOF
  if [ "$SG_DRY" = 1 ]; then
    [ $rc = 0 ] || { note "dry run: host-vs-host comparison failed"; return 1; }
    note "skipped (dry run): needs a GPU; the host-vs-host comparison itself passed"
    exit $EX_SKIP
  fi
  if [ $rc = 0 ]; then
    note "cuda and host agree: $(grep -E '^(cuda|host)_max_relative_error' "$SG_WORK/counts/$SG_STEP" | paste -sd' ' -)"
  else
    note "cuda vs host: ${why:-the reports disagree (see run-compare.log)}"
  fi
  return $rc
}

# test_order: the test binaries of $SG_BUILD/tests, newest test file first: by the age that
# scripts/bundle-deps.sh wrote to .deps/test-ages ("EPOCH NAME" lines: the commit that added
# tests/NAME.cpp; a file not committed yet reads as now), else by git here, else by the source's
# modification time. A binary with no age (added after the bundle) counts as newest. The
# sanitizers run in this order, so a deadline cuts the oldest, most often run tests, not the new.
test_order() {
  local t name age now
  now=$(date +%s)
  for t in "$SG_BUILD"/tests/*_test; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    name=$(basename "$t")
    age=$(awk -v n="$name" '$2 == n { print $1; exit }' .deps/test-ages 2>/dev/null)
    if [ -z "$age" ] && [ -f "tests/$name.cpp" ] && git rev-parse --git-dir >/dev/null 2>&1; then
      age=$(git log --diff-filter=A --format=%at -- "tests/$name.cpp" 2>/dev/null | tail -1)
    fi
    [ -z "$age" ] && [ ! -s .deps/test-ages ] && [ -f "tests/$name.cpp" ] &&
      age=$(stat -c %Y "tests/$name.cpp")
    echo "${age:-$now} $t"
  done | sort -k1,1nr -k2,2 | cut -d' ' -f2-
}

# sanitized_binaries: the test binaries whose --gtest_list_tests lists a test for
# SANITIZER_FILTER (a binary without one makes compute-sanitizer fail: "terminated before first
# instrumented API call"), newest first (test_order), into SAN_BINS; counts binaries_total,
# binaries_selected, cuda_tests and the order (first_binary).
sanitized_binaries() {
  local t n all=0 tests=0
  SAN_BINS=()
  while IFS= read -r t; do
    all=$((all + 1))
    n=$("$t" --gtest_list_tests --gtest_filter="$SANITIZER_FILTER" 2>/dev/null | grep -c '^  ')
    echo "$(basename "$t"): ${n:-0} test(s) for $SANITIZER_FILTER"
    [ "${n:-0}" -gt 0 ] && SAN_BINS+=("$t") && tests=$((tests + n))
  done < <(test_order)
  count binaries_total "$all"
  count binaries_selected "${#SAN_BINS[@]}"
  count cuda_tests "$tests"
  ((${#SAN_BINS[@]})) && count_str first_binary "$(basename "${SAN_BINS[0]}")"
  SAN_TESTS=$tests
}

# san_errors LOG: the sanitizer's error count of one binary's log: its ERROR SUMMARY, or, when the
# binary was killed before printing one, the error reports in the partial log (each starts with
# a "========= " line naming the error, its details indented below it).
san_errors() {
  local e
  e=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$1" | tail -1 | grep -oE '[0-9]+')
  if [ -z "$e" ]; then
    e=$(grep -E '^========= [A-Z]' "$1" | grep -cvE '^========= (COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|Target application|Error: process didn|This can occur)')
  fi
  echo "${e:-0}"
}

# sanitize TOOL: compute-sanitizer --tool TOOL over the cuda tests of the binaries that have some,
# a few binaries at a time. A machine that refuses the sanitizer (absent, unsupported device, no
# permission) gives 'refused' with its message. The dry run selects the binaries, then skips.
sanitize() {
  local tool=$1
  sanitized_binaries
  local bins=("${SAN_BINS[@]}")
  if [ "$SG_DRY" = 1 ]; then
    ((${#bins[@]})) || { note "dry run: no test binary lists a test for $SANITIZER_FILTER"; return 1; }
    note "skipped (dry run): needs a GPU; would run $SAN_TESTS cuda tests in ${#bins[@]} binaries, $(basename "${bins[0]}") first"
    exit $EX_SKIP
  fi
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$cs" ] || { note "refused: compute-sanitizer is not on this machine"; exit $EX_REFUSED; }
  local t
  ((${#bins[@]})) || { note "no test binary lists a cuda test (build failed?)"; return 1; }
  mkdir -p "$SG_WORK/$tool"
  # Per binary: its own log; in parallel, 4 at a time (one GPU, but the sanitizer is CPU-heavy).
  # All stop 8 s before the step's budget runs out, so that the tally below still happens.
  export CS=$cs TOOL=$tool SAN_DIR=$SG_WORK/$tool SAN_DEADLINE=$(($(date +%s) + SG_BUDGET - 8))
  export SANITIZER_FILTER PROPERTY_CASES
  printf '%s\0' "${bins[@]}" | xargs -0 -P 4 -n 1 bash -c '
    log=$SAN_DIR/$(basename "$1").log
    left=$((SAN_DEADLINE - $(date +%s)))
    if [ $left -lt 2 ]; then echo "not started: no time left in the step budget"; echo "exit=124"
    else
      REQUIRE_GPU=1 CUDA_MODULE_LOADING=EAGER SPECGRAPH_PROPERTY_CASES=$PROPERTY_CASES timeout -k 2 "$left" \
        "$CS" --tool "$TOOL" --error-exitcode 99 --print-limit 50 --report-api-errors no "$1" \
        --gtest_filter="$SANITIZER_FILTER"
      echo "exit=$?"
    fi >"$log" 2>&1' _
  local refused="" failed=0 errors=0 ran=0 tests=0 timeouts=0
  for t in "${bins[@]}"; do
    local log
    log=$SG_WORK/$tool/$(basename "$t").log
    banner "$(basename "$t")"
    cat "$log"
    ran=$((ran + 1))
    local m
    m=$(grep -m1 -iE 'device not supported|not supported on this|insufficient permission|ERR_NVGPUCTRPERM|unable to (connect|initialize|attach)|failed to (initialize|launch|create) .*sanitizer|sanitizer .*(not supported|unsupported)' "$log")
    [ -n "$m" ] && [ -z "$refused" ] && refused=$m
    errors=$((errors + $(san_errors "$log")))
    tests=$((tests + $(grep -cE '^\[       OK \]' "$log")))
    if grep -qE '^exit=(124|137)$' "$log"; then
      timeouts=$((timeouts + 1))
    elif ! grep -q '^exit=0$' "$log"; then
      failed=$((failed + 1))
    fi
  done
  count binaries "$ran"
  count binaries_failed "$failed"
  count binaries_timed_out "$timeouts"
  count tests_passed "$tests"
  count errors "$errors"
  count property_cases "$PROPERTY_CASES"
  if [ -n "$refused" ]; then
    note "refused: $(echo "$refused" | sed 's/^[= ]*//' | cut -c1-160)"
    exit $EX_REFUSED
  fi
  if [ $failed = 0 ] && [ $timeouts = 0 ]; then
    note "$ran binaries, $tests cuda tests clean under $tool"
    return 0
  fi
  if [ $failed = 0 ]; then
    note "$timeouts of $ran binaries did not finish in the budget; $tests cuda tests clean, $errors errors"
    exit 124
  fi
  note "$errors $tool error(s), $failed of $ran binaries failed${timeouts:+, $timeouts timed out}"
  return 1
}
step_memcheck() { sanitize memcheck; }
step_initcheck() { sanitize initcheck; }


# The benchmarks: one program run per BENCH_RUNS entry, each with its own JSON and a share of the
# step's time, so a slow or failing selection leaves the others' JSON whole. A failing benchmark
# ends with SkipWithError (bench/bench_support.hpp): its entry in the JSON says error_occurred.
# The dry run checks that every selection, with cuda read as host, still matches benchmarks.
step_benchmarks() {
  local deadline=$(($(date +%s) + SG_BUDGET - 3)) rc=0 failed=() total=0 entry
  local i=0 n_runs=${#BENCH_RUNS[@]}
  for entry in "${BENCH_RUNS[@]}"; do
    local name prog filter
    IFS='|' read -r name prog filter <<<"$entry"
    local b=$SG_BUILD/bench/$prog
    [ -x "$b" ] || { failed+=("$name (no $prog)"); rc=1; i=$((i + 1)); continue; }
    if [ "$SG_DRY" = 1 ]; then
      local host=${filter//\/cuda\//\/host[a-z-]*\/} n
      n=$("$b" --benchmark_list_tests --benchmark_filter="$host" 2>/dev/null | grep -c .)
      echo "$name: $prog --benchmark_filter='$host' lists ${n:-0}"
      count "${name}_host_matches" "${n:-0}"
      [ "${n:-0}" -gt 0 ] || { failed+=("$name (matches nothing)"); rc=1; }
      i=$((i + 1))
      continue
    fi
    # This run's share: the time left split evenly over the runs still to go.
    local left=$((deadline - $(date +%s))) share json=$SG_LOGS/bench_$name.json
    share=$((left / (n_runs - i)))
    i=$((i + 1))
    if [ $share -lt 2 ]; then failed+=("$name (no time left)"); rc=1; continue; fi
    banner "$prog --benchmark_filter='$filter' (at most $share s)"
    # The console line-buffered into its own file (stdbuf: the reporter writes through C stdio),
    # so a selection killed at its share still leaves every benchmark that finished; the JSON
    # file is written in blocks and is whole only when the program ends. answers.py reads the
    # console when the JSON is cut short.
    local brc=0 lb=() console=$SG_LOGS/bench_$name.console
    have stdbuf && lb=(stdbuf -oL -eL)
    CUDA_MODULE_LOADING=EAGER timeout -k 1 "$share" "${lb[@]}" "$b" --benchmark_filter="$filter" \
      --benchmark_min_time="$BENCH_MIN_TIME" --benchmark_out="$json" \
      --benchmark_out_format=json --benchmark_color=false 2>&1 | tee "$console"
    brc=${PIPESTATUS[0]}
    local got errs
    if python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$json" 2>/dev/null; then
      got=$(grep -c '"run_name"' "$json" 2>/dev/null)
      errs=$(grep -c '"error_occurred": true' "$json" 2>/dev/null)
    else  # cut short: the console's lines (a name, then a time; or ERROR OCCURRED)
      got=$(grep -cE '^[A-Za-z_]+/[^ ]+ +([0-9.]+ (ns|us|ms|s) |ERROR OCCURRED)' "$console")
      errs=$(grep -c 'ERROR OCCURRED' "$console")
      count "${name}_from_console" 1
    fi
    count "${name}_benchmarks" "${got:-0}"
    count "${name}_errors" "${errs:-0}"
    total=$((total + ${got:-0}))
    case $brc in
      0) [ "${got:-0}" -gt 0 ] || { failed+=("$name (no benchmarks ran)"); rc=1; }
         [ "${errs:-0}" = 0 ] || { failed+=("$name ($errs errors)"); rc=1; } ;;
      124 | 137) failed+=("$name (timed out after $share s; ${got:-0} benchmarks from its console)"); rc=1 ;;
      *) failed+=("$name (exit $brc)"); rc=1 ;;
    esac
  done
  count runs "$n_runs"
  if [ "$SG_DRY" = 1 ]; then
    [ $rc = 0 ] || { note "dry run: selections: ${failed[*]}"; return 1; }
    note "skipped (dry run): needs a GPU; all $n_runs selections match host benchmarks"
    exit $EX_SKIP
  fi
  count benchmarks "$total"
  if [ $rc = 0 ]; then
    note "$total cuda benchmarks in $n_runs selections (logs/bench_*.json)"
  else
    note "$total cuda benchmarks; failed: ${failed[*]}"
  fi
  return $rc
}
