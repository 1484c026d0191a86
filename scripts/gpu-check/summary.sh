#!/usr/bin/env bash
# Part of scripts/gpu-check.sh (sourced in step mode): writing summary.txt, summary.json and logs.tar.gz (sourced by the main loop).
# shellcheck disable=SC2317,SC2034

json_str() {  # a JSON string literal
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  s=$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')
  printf '"%s"' "$s"
}
json_val() {  # a number stays a number, anything else becomes a string
  if [[ $1 =~ ^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then printf '%s' "$1"; else json_str "$1"; fi
}
step_note() { cat "$SG_WORK/notes/$1" 2>/dev/null | head -1; }
# The questions the run must answer (scripts/gpu-check/answers.py; the contract checks the ids).
ANSWER_IDS=(capture step_time expand main_job sanitizers while_round csr verify extend round)

# answers.py over the work folder: answers.json and answers.txt there; a fallback saying why not
# when it fails, so the summaries always hold an answer per question.
write_answers() {
  local s q
  for s in "${STEPS[@]}"; do
    [ -n "${STATUS[$s]:-}" ] && echo "${STATUS[$s]}" >"$SG_WORK/status/$s"
  done
  if ! SG_DRY=$SG_DRY python3 "$SG_ROOT/scripts/gpu-check/answers.py" "$SG_WORK" \
      2>"$SG_WORK/answers.err"; then
    local why
    why="not answered: answers.py failed: $(tail -1 "$SG_WORK/answers.err")"
    {
      printf '['
      for q in "${ANSWER_IDS[@]}"; do
        [ "$q" = "${ANSWER_IDS[0]}" ] || printf ','
        printf '{"id":%s,"question":%s,"answered":false,"text":%s}' "$(json_str "$q")" \
          "$(json_str "$q")" "$(json_str "$why")"
      done
      printf ']'
    } >"$SG_WORK/answers.json"
    for q in "${ANSWER_IDS[@]}"; do echo "answer $q: $why"; done >"$SG_WORK/answers.txt"
  fi
}

write_summaries() {  # from STATUS etc.; steps not run yet read 'skipped' with a reason
  local final=$1 now elapsed s
  now=$(date +%s)
  elapsed=$((now - T0))
  local pending_note="not reached: the script was still running or was killed"
  [ -n "$INTERRUPTED" ] && pending_note="not run: interrupted by SIG$INTERRUPTED"
  local overall=0
  for s in "${STEPS[@]}"; do
    case ${STATUS[$s]:-} in failed | timeout) overall=1 ;; esac
  done
  [ -n "$INTERRUPTED" ] && overall=1
  write_answers
  {
    printf '{"schema":1,"tool":"scripts/gpu-check.sh","dry_run":%s,' "$([ $SG_DRY = 1 ] && echo true || echo false)"
    printf '"commit":%s,"describe":%s,"commit_source":%s,' "$(json_str "$SG_COMMIT")" \
      "$(json_str "$SG_COMMIT_DESCRIBE")" "$(json_str "$SG_COMMIT_SOURCE")"
    printf '"host":%s,"jobs":%s,"build_dir":%s,"started":%s,"finished":%s,"seconds":%s,' \
      "$(json_str "$(hostname 2>/dev/null || echo unknown)")" "$SG_JOBS" "$(json_str "$SG_BUILD")" \
      "$(json_str "$STARTED")" "$([ "$final" = 1 ] && json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)" || echo null)" "$elapsed"
    printf '"budget_seconds":%s,"packaging_reserve_seconds":%s,"limit_seconds":%s,"gpu_budgets":{' \
      "$budget_sum" "$PACKAGING_RESERVE" "$TOTAL_LIMIT"
    local bfirst=1
    for s in "${STEPS[@]}"; do
      [ $bfirst = 1 ] || printf ','
      bfirst=0
      printf '%s:%s' "$(json_str "$s")" "${BUDGET[$s]}"
    done
    printf '},"answers":%s,' "$(cat "$SG_WORK/answers.json")"
    printf '"complete":%s,"interrupted":%s,"exit_status":%s,"archive":"logs.tar.gz","steps":[' \
      "$([ "$final" = 1 ] && echo true || echo false)" \
      "$([ -n "$INTERRUPTED" ] && json_str "SIG$INTERRUPTED" || echo null)" "$overall"
    local first=1
    for s in "${STEPS[@]}"; do
      local st=${STATUS[$s]:-skipped} nt
      nt=$(step_note "$s")
      [ -z "${STATUS[$s]:-}" ] && nt=$pending_note
      [ $first = 1 ] || printf ','
      first=0
      printf '{"name":%s,"status":%s,"seconds":%s,"budget_seconds":%s,"exit_code":%s,"note":%s,"log":%s,"counts":{' \
        "$(json_str "$s")" "$(json_str "$st")" "${SECONDS_TAKEN[$s]:-0}" "$(eff_budget "$s")" \
        "${EXIT_CODE[$s]:-null}" "$(json_str "$nt")" "$(json_str "logs/$s.log")"
      local cfirst=1 line k v
      if [ -f "$SG_WORK/counts/$s" ]; then
        while IFS= read -r line; do  # key=value (typed) or key~value (string)
          k=${line%%[=~]*}
          [ -n "$k" ] && [ "$k" != "$line" ] || continue
          v=${line:${#k}+1}
          [ $cfirst = 1 ] || printf ','
          cfirst=0
          if [ "${line:${#k}:1}" = "~" ]; then
            printf '%s:%s' "$(json_str "$k")" "$(json_str "$v")"
          else
            printf '%s:%s' "$(json_str "$k")" "$(json_val "$v")"
          fi
        done <"$SG_WORK/counts/$s"
      fi
      printf '}}'
    done
    printf ']}\n'
  } >"$results/summary.json.tmp" && mv "$results/summary.json.tmp" "$results/summary.json"

  {
    echo "specgraph GPU check$([ $SG_DRY = 1 ] && echo ' (DRY RUN: no GPU)') - $STARTED - commit $SG_COMMIT_DESCRIBE ($SG_COMMIT_SOURCE)"
    printf '%-14s %-8s %7s %7s  %s\n' step status seconds budget note
    for s in "${STEPS[@]}"; do
      local nt
      nt=$(step_note "$s")
      [ -z "${STATUS[$s]:-}" ] && nt=$pending_note
      printf '%-14s %-8s %7s %7s  %s\n' "$s" "${STATUS[$s]:-skipped}" "${SECONDS_TAKEN[$s]:-0}" \
        "$(eff_budget "$s")" "$nt"
    done
    printf '%-14s %-8s %7s %7s\n' total "$([ $overall = 0 ] && echo ok || echo FAILED)" "$elapsed" "$budget_sum"
    local c
    c=$(grep -h -E '^(passed|failed|skipped)=' "$SG_WORK/counts/tests" 2>/dev/null | paste -sd' ' -)
    [ -n "$c" ] && echo "tests: $c"
    echo "what the run answers (docs/gpu-check.md):"
    cat "$SG_WORK/answers.txt"
    [ "$final" = 1 ] || echo "(incomplete: written while the run was still going)"
    echo "results: $results (summary.txt, summary.json, logs.tar.gz)"
  } >"$results/summary.txt.tmp" && mv "$results/summary.txt.tmp" "$results/summary.txt"

  # The archive: every log and data file, under logs/.
  tar -czf "$results/logs.tar.gz.tmp" -C "$SG_WORK" logs 2>/dev/null &&
    mv "$results/logs.tar.gz.tmp" "$results/logs.tar.gz"
  OVERALL=$overall
}

