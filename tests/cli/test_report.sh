#!/usr/bin/env bash
# `scaletrain report RUN_DIR` (issues 18 and 38):
#  - a finished 2-rank run with a slow rank: report/index.html is one page with
#    at least four well-formed SVG plots, no fetches, both ranks in the heat map,
#    the straggler in the summary in words; rank 0's wait is charged to
#    waiting for rank 1, not to communication, on the console and the page;
#  - with a `scaletrain bench` profile: measured (the slow rank's step) and
#    predicted side by side, the slow rank named as the cause;
#  - --cluster NAME without the profile that defines it is an error naming
#    --hardware; a GPU cluster against a CPU run is a warning, on the page too;
#  - a run still in progress reports as far as it got;
#  - a hung job (rank 1 stuck in compute; rank 0's watchdog fires): the flight
#    records name rank 1 and the collective, on the console and on the page;
#  - a directory that is not a run is one clear error.
# Usage: test_report.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
shape=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
  --set training.global_batch_size=8 --set training.micro_batch_size=4 --set parallel.dp=2)
args=(train --config "$root/configs/shakespeare_char.toml" --quiet "${shape[@]}" --set training.threads=1
  --set training.eval_interval=10 --set training.eval_steps=1 --set training.sample_tokens=0
  --set checkpoint.interval=0 --set telemetry.rank_interval=5 --set telemetry.peak_tflops=0.05
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")

# The page's checks: N plots at least, each a well-formed SVG, nothing fetched.
check_page() {  # HTML MIN_PLOTS WORDS...
  local html=$1 min=$2
  shift 2
  $py - "$html" "$min" "$@" <<'PY'
import re, sys, xml.dom.minidom
html, want = open(sys.argv[1]).read(), int(sys.argv[2])
svgs = re.findall(r"<svg .*?</svg>", html, re.S)
bad = []
if len(svgs) < want: bad.append("%d plots, want >= %d" % (len(svgs), want))
for s in svgs:
    try: xml.dom.minidom.parseString(s)
    except Exception as e: bad.append("an SVG is not well-formed: %s" % e)
if re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html): bad.append("the page fetches something")
for w in sys.argv[3:]:
    if w not in html: bad.append("no '%s'" % w)
print("; ".join(bad))
PY
}

# A finished run, rank 1 slowed: plots, heat map rows, the straggler.
if ! timeout 300 mpirun -np 2 "$bin" "${args[@]}" --set training.steps=30 --set faults.slow_rank=1 \
    --set faults.slow_ms=15 --run-dir "$work/run" >"$work/run.out" 2>&1; then
  fail "training failed: $(tail -5 "$work/run.out")"
fi
if "$bin" report "$work/run" >"$work/report.out" 2>&1; then
  grep -q "report: $work/run/report/index.html" "$work/report.out" && pass=$((pass + 1)) ||
    fail "report's console line: $(cat "$work/report.out")"
  grep -qE "^slow rank: rank 1 computes [0-9.]+x the others" "$work/report.out" && pass=$((pass + 1)) ||
    fail "report names the slow rank: $(cat "$work/report.out")"
  bad=$(check_page "$work/run/report/index.html" 5 "finished: 30 steps" "rank 0, " "rank 1, " \
    "rank 1 (" "Loss" "Throughput" "Model FLOPs utilisation" "Memory per rank" "No prediction: pass --cluster" \
    "Where each rank&#39;s step went" "<th>waiting for a slower rank</th>" "per step, waiting for it: rank 0 ")
  [ -z "$bad" ] && pass=$((pass + 1)) || fail "report page: $bad"
else
  fail "report failed: $(cat "$work/report.out")"
fi

# Measured against the planner, on this machine's profile (a quick bench).
if mpirun -np 2 "$bin" bench --output "$work/hw.toml" --name here --threads 1 --min-seconds 0.05 \
    --max-allreduce-mb 1 --stream-mb 8 --config "$root/configs/shakespeare_char.toml" "${shape[@]}" \
    --set "data.train=\"$work/data/train.bin\"" >"$work/bench.out" 2>&1; then
  if "$bin" report "$work/run" --hardware "$work/hw.toml" --cluster here >"$work/report2.out" 2>&1 &&
      grep -q "step time: measured .* ms (rank 1, the slowest, .*), predicted .* ms" "$work/report2.out"; then
    bad=$(check_page "$work/run/report/index.html" 6 "Measured against the planner" "cluster here" \
      "Step time: measured and predicted" "because rank 1 computes")
    [ -z "$bad" ] && pass=$((pass + 1)) || fail "page with a prediction: $bad"
  else
    fail "report with a prediction: $(cat "$work/report2.out")"
  fi
  # The profile's cluster without the profile: an error that names --hardware, and no page.
  rm -f "$work/run/report/index.html"
  expect_error "pass --hardware FILE" report "$work/run" --cluster here
  [ ! -e "$work/run/report/index.html" ] && pass=$((pass + 1)) || fail "a page was written despite the error"
  # A GPU cluster against this CPU run: said on the console and on the page.
  if "$bin" report "$work/run" --cluster dgx-h100 >"$work/report3.out" 2>"$work/report3.err" &&
      grep -q "^warning: the run trained on CPU ranks (training.device = cpu) and --cluster dgx-h100 is a GPU cluster" \
        "$work/report3.err"; then
    bad=$(check_page "$work/run/report/index.html" 6 "<p class=alert>the run trained on CPU ranks")
    [ -z "$bad" ] && pass=$((pass + 1)) || fail "page with another cluster: $bad"
  else
    fail "report against a GPU cluster: $(cat "$work/report3.out" "$work/report3.err")"
  fi
else
  fail "bench failed: $(grep -i error "$work/bench.out" | head -3)"
fi

# A run in progress.
mpirun -np 2 "$bin" "${args[@]}" --set training.steps=100000 --run-dir "$work/live" >"$work/live.out" 2>&1 &
job=$!
if st_wait_records "$work/live" 6 $job && "$bin" report "$work/live" >"$work/live_report.out" 2>&1; then
  grep -q "run not finished" "$work/live_report.out" && pass=$((pass + 1)) ||
    fail "a live run: $(cat "$work/live_report.out")"
  bad=$(check_page "$work/live/report/index.html" 4 "in progress (or stopped)")
  [ -z "$bad" ] && pass=$((pass + 1)) || fail "live page: $bad"
else
  fail "report of a live run: $(cat "$work/live_report.out" 2>/dev/null) $(tail -3 "$work/live.out")"
fi
kill -USR1 $job 2>/dev/null
wait $job

# A hung job: rank 1 computes for 30 s in step 1; rank 0's watchdog (2 s)
# fires in the gradient all-reduce and ends the job.
timeout 120 mpirun -np 2 "$bin" "${args[@]}" --set training.steps=5 --set parallel.comm_timeout_s=2 \
  --set faults.slow_rank=1 --set faults.slow_ms=30000 --run-dir "$work/hung" >"$work/hung.out" 2>&1
[ -f "$work/hung/flight/rank-0.json" ] && [ -f "$work/hung/flight/rank-1.json" ] && pass=$((pass + 1)) ||
  fail "flight records: $(ls "$work/hung/flight" 2>&1); $(tail -3 "$work/hung.out")"
if "$bin" report "$work/hung" >"$work/hung_report.out" 2>&1 &&
    grep -q "flight records: the job stuck in allreduce #[0-9]* of [0-9]* bytes on group 'dp' at step 1 (ranks 0, 1): rank 1 never entered it" \
      "$work/hung_report.out"; then
  pass=$((pass + 1))
  bad=$(check_page "$work/hung/report/index.html" 4 "rank 1 never entered it" "entered it and waited")
  [ -z "$bad" ] && pass=$((pass + 1)) || fail "hung page: $bad"
else
  fail "report of the hung job: $(cat "$work/hung_report.out")"
fi

# Not a run directory.
mkdir -p "$work/empty"
expect_error "is not a run directory" report "$work/empty"
expect_error "no run directory at" report "$work/nowhere"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
