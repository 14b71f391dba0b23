#!/usr/bin/env bash
# `scaletrain bench` writes a hardware profile that `scaletrain plan` loads and
# predicts with: one rank, and two ranks under mpirun (which adds the
# all-reduce figures). Checks the profile's figures against the bench's own
# printed measurements and the plan's use of them (not timings: those are
# recorded in docs/planner.md by bench/plan_cpu_check.sh). Bad input: one
# error line naming the fix.
# Usage: test_bench_cli.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
export OMP_WAIT_POLICY=PASSIVE
config=$root/configs/shakespeare_char.toml
model=(--set model.n_layer=2 --set model.n_embd=64 --set model.block_size=32 --set training.micro_batch_size=4
  --set training.global_batch_size=8 --vocab 65)
quick=(--min-seconds 0.01 --max-allreduce-mb 0.25 --stream-mb 4)

# check_profile PROFILE BENCH_STDOUT NAME RANKS PLAN_JSON
check_profile() {
  $py - "$@" <<'PY'
import json, re, sys, tomllib
prof_path, out_path, name, ranks, plan_path = sys.argv[1:6]
ranks = int(ranks)
prof = tomllib.load(open(prof_path, "rb"))
out = open(out_path).read()
plan = json.load(open(plan_path))
g, n, c = prof["gpu"][name], prof["node"][name], prof["cluster"][name]
assert c == {"gpu": name, "node": name, "fabric": name, "usd_per_gpu_hour": 0.0, "pue": 1.0}, c
# The recorded matrix rate is the best GEMM rate the bench printed (three
# large squares and the model's own shapes).
squares = re.findall(r"square \d+ .* ([0-9.e+-]+) TFLOP/s", out)
rates = [float(x) for x in re.findall(r"x +\d+ +([0-9.e+-]+) TFLOP/s", out)]
assert len(squares) == 3 and len(rates) == 13, (squares, rates)
assert abs(g["fp32_tflops"] - max(rates)) <= 1e-3 * max(rates), (g["fp32_tflops"], rates)
# ...and the bandwidth the large-array element-wise kernel reached.
bw = float(re.search(r"^\s+4096 KiB arrays\s+([0-9.e+-]+) GB/s", out, re.M).group(1))
assert abs(g["hbm_tbps"] * 1000 - bw) <= 1e-3 * bw, (g["hbm_tbps"], bw)
# The model's own matmul shapes were measured: 2 layers' kinds + logits, fwd and bwd.
assert len(re.findall(r"(forward|backward) +\d+ x", out)) == 10, out
assert n["gpus_per_node"] == ranks
if ranks > 1:
    sizes = re.findall(r"^\s+(\d+) bytes\s+([0-9.]+) us\s+bus ([0-9.e+-]+) GB/s", out, re.M)
    assert [int(s[0]) for s in sizes] == [8 * 4 ** i for i in range(len(sizes))] and len(sizes) >= 5, sizes
    assert abs(n["intra_gbps"] - float(sizes[-1][2])) <= 1e-2 * float(sizes[-1][2]), (n, sizes[-1])
# The planner used this device: its name, its rate, and MFU below 1 of it.
assert plan["cluster"]["gpu"] == name and plan["layout"]["precision"] == "fp32", plan["cluster"]
assert plan["software"] == "cpu" and plan["memory_breakdown_gib"]["other"] == 0
assert 0 < plan["mfu"] < 1, plan["mfu"]
flops_floor = plan["tflops_per_gpu"] / plan["mfu"]  # = the peak the plan divided by
assert abs(flops_floor - g["fp32_tflops"]) <= 1e-6 * g["fp32_tflops"], (flops_floor, g["fp32_tflops"])
if ranks > 1:
    assert plan["layout"]["dp"] == ranks and plan["dp_step"]["payload_bytes"] > 0
print(f"{name}: {g['fp32_tflops']:.3g} TFLOP/s, {g['hbm_tbps'] * 1000:.3g} GB/s, node {n['intra_gbps']:.3g} GB/s; "
      f"plan {plan['step_time_s'] * 1e3:.1f} ms/step")
PY
}

# One rank.
if "$bin" bench --output "$tmp/one.toml" --name t1 --threads 1 --config "$config" "${model[@]}" "${quick[@]}" \
    >"$tmp/one.out" 2>"$tmp/err"; then
  if "$bin" plan --train-config "$config" "${model[@]}" --hardware "$tmp/one.toml" --cluster t1 --json \
      >"$tmp/one.json" 2>"$tmp/err"; then
    check_profile "$tmp/one.toml" "$tmp/one.out" t1 1 "$tmp/one.json" && pass=$((pass + 1)) || fail "one-rank profile"
  else
    fail "plan with the one-rank profile: $(cat "$tmp/err")"
  fi
else
  fail "bench (one rank): $(cat "$tmp/err")"
fi

# Two ranks under mpirun: the all-reduce figures, and a dp=2 plan on them.
if timeout 300 mpirun -np 2 "$bin" bench --output "$tmp/two.toml" --name t2 --threads 1 --config "$config" \
    "${model[@]}" "${quick[@]}" >"$tmp/two.out" 2>"$tmp/err"; then
  if "$bin" plan --train-config "$config" "${model[@]}" --set parallel.dp=2 --hardware "$tmp/two.toml" \
      --cluster t2 --json >"$tmp/two.json" 2>"$tmp/err"; then
    check_profile "$tmp/two.toml" "$tmp/two.out" t2 2 "$tmp/two.json" && pass=$((pass + 1)) || fail "two-rank profile"
  else
    fail "plan with the two-rank profile: $(cat "$tmp/err")"
  fi
else
  fail "bench (two ranks): $(cat "$tmp/err")"
fi

# Bad input: non-zero exit and one line that names the fix (expect_error in lib.sh).
expect_error "may hold only letters" bench --output "$tmp/x.toml" --name "my cpu"
expect_error "--threads must be >= 0" bench --output "$tmp/x.toml" --threads -1
expect_error "--min-seconds must be positive" bench --output "$tmp/x.toml" --min-seconds 0
expect_error "pass --output to a writable path" bench --output "$tmp/no/such/dir/x.toml" "${quick[@]}"
expect_error "use it with --config" bench --output "$tmp/x.toml" --set training.steps=1
expect_error "valid keys in \[model\]" bench --output "$tmp/x.toml" --config "$config" --set model.n_layerz=1
[ -e "$tmp/x.toml" ] && fail "a failed bench left $tmp/x.toml"
# A one-rank profile cannot plan two ranks; a profile without bf16 names fp32.
if [ -f "$tmp/one.toml" ]; then
  expect_error "mpirun -np 2 scaletrain bench" plan --train-config "$config" "${model[@]}" --set parallel.dp=2 \
    --hardware "$tmp/one.toml" --cluster t1
  expect_error "use --precision fp32" plan --train-config "$config" "${model[@]}" --precision bf16 \
    --hardware "$tmp/one.toml" --cluster t1
  sed 's/^fp32_tflops = .*/fp32_tflops = "fast"/' "$tmp/one.toml" >"$tmp/bad.toml"
  expect_error "fp32_tflops" plan --train-config "$config" "${model[@]}" --hardware "$tmp/bad.toml" --cluster t1
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
