#!/usr/bin/env bash
# The scaling benchmark's quick path (issue 17), as the suite can afford it:
# bench/cluster_scaling.sh on 1 and 2 emulated hosts at 100 Mbit/s, data
# parallelism only. Checks that the whole chain runs (cluster up, bench
# across hosts, plan from that profile, training, cluster down) and that OUT
# holds the rows and the MAPE; the timings themselves are not judged here
# (docs/scaling.md has the full quick run). Bad arguments are one clear error.
# Skips with one line where the machine cannot (not root, no iproute2, no
# network namespaces).
# Usage: test_cluster_scaling.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the emulated cluster needs root"; exit 0; }
command -v ip >/dev/null || { echo "SKIP: ip not found (apt-get install iproute2)"; exit 0; }
if ! ip netns add st-probe 2>/dev/null; then
  echo "SKIP: this machine cannot create network namespaces"
  exit 0
fi
ip netns delete st-probe
bench=$root/bench/cluster_scaling.sh
build=$(dirname "$bin")

if timeout 600 "$bench" --quick --families dp --hosts 1,2 --rates 100 --build "$build" --json "$work/out.json" \
    >"$work/bench.out" 2>&1; then
  pass=$((pass + 1))
else
  fail "cluster_scaling.sh failed: $(tail -5 "$work/bench.out")"
fi
if out=$($py - "$work/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert [(r["layout"], r["hosts"], r["rate_mbit"]) for r in rows] == [("dp", 1, 0), ("dp", 2, 100)], rows
for r in rows:
    for k in ("measured_step_s", "predicted_step_s", "tokens_per_s"):
        assert r[k] > 0, (k, r)
    assert set(r["predicted_breakdown_s"]) >= {"compute", "dp_comm"}, r["predicted_breakdown_s"]
assert rows[1]["predicted_breakdown_s"]["dp_comm"] > 0, "no DP communication predicted across hosts"
assert rows[1]["measured_breakdown_s"]["exposed_comm_s"] > 0, "no DP communication measured across hosts"
assert d["mape"] == round(sum(abs(r["error_pct"]) for r in rows) / 2, 2), d["mape"]
print("2 rows, MAPE %.1f%%" % d["mape"])
PY
); then
  echo "ok rows: $out"; pass=$((pass + 1))
else
  fail "OUT: $out"
fi
[ -z "$(ip netns list | grep '^st-h')" ] && pass=$((pass + 1)) || fail "namespaces left: $(ip netns list)"

# Bad arguments: one error naming the fix, before anything runs.
if "$bench" --quick >"$work/e1" 2>&1; then fail "no --json accepted"; else
  grep -q "error: --json OUT is required" "$work/e1" && pass=$((pass + 1)) || fail "no --json: $(cat "$work/e1")"
fi
if "$bench" --json x --frobnicate >"$work/e2" 2>&1; then fail "an unknown argument accepted"; else
  grep -q "error: unknown argument '--frobnicate'" "$work/e2" && pass=$((pass + 1)) || fail "unknown: $(cat "$work/e2")"
fi
echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
