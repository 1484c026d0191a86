#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz/ for a while on a scratch copy of its seed corpus.
#
#   scripts/fuzz.sh [--update-corpus] [seconds-per-harness] [build-dir]
#
# seconds-per-harness: default 60. build-dir: a build with SPECGRAPH_BUILD_FUZZERS=ON (clang),
# default build-asan (cmake --preset asan; built here when the harnesses are missing).
# Each harness runs as -jobs/-workers parallel fuzzing processes (one per core, at most 4) with
# its dictionary (tests/fuzz/<name>.dict, <name> without "_fuzz") where one exists. New inputs
# stay in the scratch folder unless --update-corpus is given: then they are merged (minimised)
# into tests/fuzz/corpus/<harness>/. Prints executions, time and crashes per harness; exits 1 on
# any crash, leaving the crash files in the scratch folder and printing their paths. Known,
# reported bugs (tests/fuzz/known_bugs/) are skipped by the harnesses unless
# SPECGRAPH_FUZZ_STRICT=1 is set.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

update=0
args=()
for a in "$@"; do
  case "$a" in
    --update-corpus) update=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
  esac
done
seconds=${args[0]:-60}
build=${args[1]:-build-asan}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: seconds-per-harness must be a number, not '$seconds'" >&2; exit 2; }
[[ "$build" = /* ]] || build="$root/$build"

harnesses=(json_fuzz plan_fuzz kernels_fuzz kv_indices_fuzz verify_fuzz extend_fuzz round_fuzz runtime_fuzz)
missing=0
for h in "${harnesses[@]}"; do [ -x "$build/tests/fuzz/$h" ] || missing=1; done
if ((missing)); then
  if [ "$build" = "$root/build-asan" ]; then
    echo "== building the harnesses (cmake --preset asan)"
    cmake --preset asan >/dev/null
    cmake --build "$build" --target "${harnesses[@]}"
  else
    echo "fuzz.sh: no harnesses in $build/tests/fuzz (configure with SPECGRAPH_BUILD_FUZZERS=ON and clang)" >&2
    exit 2
  fi
fi

cores=$(nproc 2>/dev/null || echo 1)
workers=$((cores < 4 ? cores : 4))
scratch=$(mktemp -d "${TMPDIR:-/tmp}/specgraph-fuzz.XXXXXX")
echo "== fuzzing ${#harnesses[@]} harnesses, ${seconds} s each, ${workers} worker(s); scratch: $scratch"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
status=0
summary=()
for h in "${harnesses[@]}"; do
  dir="$scratch/$h"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/logs"
  cp "$root/tests/fuzz/corpus/$h/"* "$dir/corpus/" 2>/dev/null || true
  dict="$root/tests/fuzz/${h%_fuzz}.dict"
  opts=(-max_total_time="$seconds" -timeout=10 -print_final_stats=1
        -artifact_prefix="$dir/artifacts/")
  [ -f "$dict" ] && opts+=(-dict="$dict")
  start=$(date +%s)
  # -jobs writes fuzz-<n>.log into the current folder: run from the logs folder.
  (cd "$dir/logs" && "$build/tests/fuzz/$h" "${opts[@]}" -jobs="$workers" -workers="$workers" \
    "$dir/corpus" >"$dir/logs/main.log" 2>&1) || true
  elapsed=$(($(date +%s) - start))
  execs=$(cat "$dir/logs"/fuzz-*.log 2>/dev/null |
          awk '/stat::number_of_executed_units:/ {n += $2} END {print n + 0}')
  crashes=()
  while IFS= read -r f; do crashes+=("$f"); done < <(find "$dir/artifacts" -type f | sort)
  # A worker that died without leaving an artifact still counts.
  if ((${#crashes[@]} == 0)) && grep -lqE "PROMISE BROKEN|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:" \
      "$dir/logs"/*.log 2>/dev/null; then
    crashes+=("(see $dir/logs)")
  fi
  new=$(($(find "$dir/corpus" -type f | wc -l) - $(find "$root/tests/fuzz/corpus/$h" -type f | wc -l)))
  line=$(printf "%-13s %10s execs %5s s %4s crash(es) %5s new inputs" "$h" "$execs" "$elapsed" \
         "${#crashes[@]}" "$new")
  echo "$line"
  summary+=("$line")
  if ((${#crashes[@]})); then
    status=1
    for f in "${crashes[@]}"; do echo "    crash: $f"; done
    # A slow unit or a timeout names no such line: grep finding nothing must not end the script
    # (set -o pipefail) before the later harnesses run.
    { grep -hE -A3 "PROMISE BROKEN|ERROR: |runtime error:|Slowest unit|timeout" "$dir/logs"/*.log || true; } |
      head -20 | sed 's/^/    /'
  elif ((update)); then
    "$build/tests/fuzz/$h" -merge=1 "$root/tests/fuzz/corpus/$h" "$dir/corpus" \
      >"$dir/logs/merge.log" 2>&1
    echo "    merged into tests/fuzz/corpus/$h: $(grep -oE 'added [0-9]+ new units' "$dir/logs/merge.log" | tail -1)"
  fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if ((status)); then
  echo "== crashes found; inputs and logs under $scratch (reproduce: <build>/tests/fuzz/<harness> <crash file>)"
else
  echo "== no crashes"
  rm -rf "$scratch"
fi
exit "$status"
