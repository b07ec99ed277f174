# The steps of scripts/gpu-checks.sh, sourced by it (and by its tests): step, check and skip
# append one line each to $steps (name, outcome, exit code, seconds[, note]) and write
# $out/NAME.log. They read $out, $steps, and optionally BUDGET, STEPS and EXPECT.

# step NAME SECONDS CMD...: run CMD bounded by SECONDS, output in $out/NAME.log, outcome in steps.tsv.
# EXPECT=nonzero: the command is meant to fail (the hang); then exit 0 is the failure.
budget=${BUDGET:-0}
skip() { printf '%s\tskipped\t-\t0\t%s\n' "$1" "$2" >>"$steps"; echo "== $1 skipped: $2"; }
step() {
  local name=$1 limit=$2 t0=$SECONDS rc status left
  shift 2
  if [ -n "${STEPS:-}" ] && ! [[ $name =~ ^(${STEPS})$ ]]; then return; fi  # STEPS='a|b_.*': these only
  if [ "$budget" -gt 0 ]; then  # the whole run's bound: a step gets what is left, less the report's
    left=$((budget - SECONDS - 10))
    if [ "$left" -lt 20 ]; then skip "$name" "out of the run's time budget (BUDGET=$budget s)"; return; fi
    limit=$((limit < left ? limit : left))
  fi
  echo "== $name (at most ${limit} s)"
  timeout --kill-after=15 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  # timeout's own 124/137 only when the limit was reached: the watchdog's verdict also exits 124
  if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ $((SECONDS - t0)) -ge "$limit" ]; then status=timeout
  elif [ "${EXPECT:-zero}" = nonzero ]; then status=$([ $rc -ne 0 ] && echo ok || echo failed)
  else status=$([ $rc -eq 0 ] && echo ok || echo failed); fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$((SECONDS - t0))" >>"$steps"
  tail -n 2 "$out/$name.log"
}
# check NAME CMD...: a step's verdict line (a Python check of what earlier steps left) as NAME.result
check() {
  local name=$1
  shift
  step "$name" 120 "$@"
  [ -f "$out/$name.log" ] && tail -n 1 "$out/$name.log" >"$out/$name.result"
}

