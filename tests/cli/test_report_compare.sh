#!/usr/bin/env bash
# `scaletrain report --compare RUN_DIR...` (issue 32): runs of one model at dp
# 1, 2 and 3 become one page with the scaling curve (tokens/s per rank against
# the 1-rank run) and a row per run; with a `scaletrain bench` profile the
# planner's curve is drawn beside it and each run's error printed; one run
# alone, or a cluster the planner cannot model, is one error.
# Usage: test_report_compare.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }

st_small_data 100000
st_tiny_train_args
for dp in 1 2 3; do
  mpirun -np $dp "$bin" "${tiny[@]}" --set training.steps=6 --set parallel.dp=$dp \
    --set training.global_batch_size=$((8 * dp)) --run-dir "$work/dp$dp" >"$work/dp$dp.out" 2>&1 ||
    fail "dp $dp did not train: $(tail -3 "$work/dp$dp.out")"
done

if "$bin" report --compare "$work/dp1" "$work/dp2" "$work/dp3" --output "$work/s.html" >"$work/c.out" 2>&1; then
  if out=$($py - "$work/s.html" "$work/c.out" <<'PY'
import re, sys, xml.dom.minidom
html, text = open(sys.argv[1]).read(), open(sys.argv[2]).read()
svgs = re.findall(r"<svg .*?</svg>", html, re.S)
assert len(svgs) == 2, "%d plots" % len(svgs)
for s in svgs:
    xml.dom.minidom.parseString(s)
for d in ("dp1", "dp2", "dp3"):
    assert d in html, d
# The 1-rank run is the base: efficiency 1.00 exactly; the others a figure.
effs = [float(x) for x in re.findall(r"efficiency (\d+\.\d+)", text)]
assert len(effs) == 3 and effs[0] == 1.0 and all(0 < e < 2 for e in effs), effs
print("2 plots, efficiencies %s" % effs)
PY
  ); then
    echo "ok compare: $out"; pass=$((pass + 1))
  else
    fail "compare page: $out"
  fi
else
  fail "report --compare: $(cat "$work/c.out")"
fi

# With the planner: a profile of this machine under 3 ranks.
if mpirun -np 3 "$bin" bench --output "$work/hw.toml" --name here --threads 1 --min-seconds 0.02 \
    --max-allreduce-mb 1 --stream-mb 8 >"$work/bench.out" 2>&1; then
  if "$bin" report --compare "$work/dp1" "$work/dp2" "$work/dp3" --cluster here --hardware "$work/hw.toml" \
      --output "$work/p.html" >"$work/p.out" 2>&1 && [ "$(grep -c "(predicted [0-9.]*)" "$work/p.out")" -eq 3 ] &&
      grep -q "Predicted on cluster here" "$work/p.html"; then
    pass=$((pass + 1))
  else
    fail "compare with the planner: $(cat "$work/p.out")"
  fi
else
  fail "bench: $(tail -3 "$work/bench.out")"
fi

expect_error "two or more run directories" report --compare "$work/dp1"
expect_error "--hardware" report --compare "$work/dp1" "$work/dp2" --cluster no-such-cluster
expect_error "not a run directory" report --compare "$work/dp1" "$work/data"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
