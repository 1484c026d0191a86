#!/usr/bin/env bash
# Part of scripts/gpu-check.sh (sourced in step mode): the run-compare, sanitizer, python, torch-example, benchmark and peer-torch steps.
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
    "$tool" run --executor "${r%%:*}" "${RUN_CONFIG[@]}" --json "$SG_LOGS/run-${r#*:}.json" \
      2>"$SG_WORK/run-compare.err" || { rc=1; why+="${r%%:*} run: $(tail -1 "$SG_WORK/run-compare.err"); "; }
    cat "$SG_WORK/run-compare.err"
  done
  banner compare
  python3 - "$SG_LOGS/run-${runs[0]#*:}.json" "$SG_LOGS/run-${runs[1]#*:}.json" \
    "$SG_WORK/counts/$SG_STEP" <<'EOF' || rc=1
import json, sys
pa, pb, counts = sys.argv[1:4]
try:
    a, b = json.load(open(pa)), json.load(open(pb))
except Exception as e:  # a run failed before writing its report
    print(f"cannot read both reports: {e}")
    sys.exit(1)
problems = []
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

# sanitize TOOL: compute-sanitizer --tool TOOL over the cuda instances of every test binary, a few
# binaries at a time. A machine that refuses the sanitizer (absent, unsupported device, no
# permission) gives 'refused' with its message.
sanitize() {
  local tool=$1
  [ "$SG_DRY" = 1 ] && dry_skip
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  [ -n "$cs" ] || { note "refused: compute-sanitizer is not on this machine"; exit $EX_REFUSED; }
  local bins=()
  local t
  for t in "$SG_BUILD"/tests/*_test; do [ -x "$t" ] && [ -f "$t" ] && bins+=("$t"); done
  ((${#bins[@]})) || { note "no test binaries (build failed?)"; return 1; }
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
      REQUIRE_GPU=1 SPECGRAPH_PROPERTY_CASES=$PROPERTY_CASES timeout -k 2 "$left" \
        "$CS" --tool "$TOOL" --error-exitcode 99 --print-limit 50 "$1" \
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
    local e
    e=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    errors=$((errors + ${e:-0}))
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

step_python() {
  if [ ! -d python ] && [ ! -f pyproject.toml ]; then
    note "skipped: no python/ or pyproject.toml"
    exit $EX_SKIP
  fi
  [ "$SG_DRY" = 1 ] && dry_skip
  local links=()
  [ -d .whl ] && links=(--find-links .whl)
  # --no-build-isolation installs no build requirements: the build needs tvm_ffi already.
  python3 -c "import tvm_ffi" 2>/dev/null ||
    python3 -m pip install --no-index "${links[@]}" apache-tvm-ffi ||
    { note "apache-tvm-ffi not installable offline (run scripts/bundle-deps.sh: .whl/)"; return 1; }
  python3 -m pip install --no-build-isolation --no-index "${links[@]}" . ||
    { note "pip install failed"; return 1; }
  local junit=$SG_LOGS/pytest-junit.xml rc=0
  REQUIRE_GPU=1 python3 -m pytest python/tests -q --junitxml="$junit" || rc=1
  if [ -s "$junit" ]; then
    local head
    head=$(tr '\n\t' '  ' <"$junit" | grep -m1 -o '<testsuite [^>]*>')
    local n f e s
    n=$(echo "$head" | grep -oE ' tests="[0-9]+"' | grep -oE '[0-9]+')
    f=$(echo "$head" | grep -oE ' failures="[0-9]+"' | grep -oE '[0-9]+')
    e=$(echo "$head" | grep -oE ' errors="[0-9]+"' | grep -oE '[0-9]+')
    s=$(echo "$head" | grep -oE ' skipped="[0-9]+"' | grep -oE '[0-9]+')
    count tests "${n:-0}"
    count failed $((${f:-0} + ${e:-0}))
    count skipped "${s:-0}"
    count passed $((${n:-0} - ${f:-0} - ${e:-0} - ${s:-0}))
  fi
  note "pytest: $(tail -1 "$SG_LOGS/python.log")"
  return $rc
}

step_torch_example() {
  [ -f examples/torch_draft_loop.py ] || { note "skipped: no examples/torch_draft_loop.py"; exit $EX_SKIP; }
  [ "$SG_DRY" = 1 ] && dry_skip
  REQUIRE_GPU=1 PYTHONUNBUFFERED=1 python3 examples/torch_draft_loop.py ||
    { note "examples/torch_draft_loop.py failed"; return 1; }
  note "examples/torch_draft_loop.py: $(tail -1 "$SG_LOGS/torch-example.log" | cut -c1-120)"
}

step_benchmarks() {
  [ "$SG_DRY" = 1 ] && dry_skip
  local progs=() b
  for b in "$SG_BUILD"/bench/bench_*; do [ -x "$b" ] && [ -f "$b" ] && progs+=("$b"); done
  ((${#progs[@]})) || { note "no benchmark programs (build failed?)"; return 1; }
  local rc=0 n=0 total=0 failed=()
  for b in "${progs[@]}"; do
    local name json
    name=$(basename "$b")
    json=$SG_LOGS/$name.json
    banner "$name --benchmark_filter=cuda"
    if ! "$b" --benchmark_filter=cuda --benchmark_min_time="$BENCH_MIN_TIME" \
        --benchmark_out="$json" --benchmark_out_format=json; then
      failed+=("$name")
      rc=1
    fi
    n=$(grep -c '"run_name"' "$json" 2>/dev/null)
    count "${name}_benchmarks" "${n:-0}"
    total=$((total + ${n:-0}))
    [ "${n:-0}" -gt 0 ] || { failed+=("$name (no cuda benchmarks)"); rc=1; }
  done
  count programs "${#progs[@]}"
  count benchmarks "$total"
  if [ $rc = 0 ]; then
    note "$total cuda benchmarks in ${#progs[@]} programs (JSON in logs.tar.gz)"
  else
    note "failed: ${failed[*]}"
  fi
  return $rc
}

step_peer_torch() {
  [ -f bench/peer_torch.py ] || { note "skipped: no bench/peer_torch.py"; exit $EX_SKIP; }
  [ "$SG_DRY" = 1 ] && dry_skip
  PYTHONUNBUFFERED=1 python3 bench/peer_torch.py --json "$SG_LOGS/peer-torch.json" ||
    { note "bench/peer_torch.py failed"; return 1; }
  note "bench/peer_torch.py: JSON in logs.tar.gz"
}

