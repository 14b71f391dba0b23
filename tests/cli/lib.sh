# Sourced by the CLI tests (tests/cli/test_*.sh, run by ctest as
# `test_X.sh PATH/TO/scaletrain REPO_ROOT`).
#
# st_cli_init BIN ROOT: sets $bin, $root, $py; lets OpenMPI run as root and
# oversubscribe the cores; makes the scratch directory $work (also $tmp),
# removed at exit; zeroes the $pass and $fails counters; defines fail().
st_cli_init() {
  set -u
  bin=$1
  root=$2
  py=/usr/bin/python3
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  work=$(mktemp -d)
  tmp=$work
  trap 'rm -rf "$work"' EXIT
  fails=0
  pass=0
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# st_small_data BYTES: the first BYTES of Tiny Shakespeare, prepared into
# $work/data (train.bin, val.bin, vocab.json); exits the test on failure.
st_small_data() {
  head -c "$1" "$root/data/tinyshakespeare.txt" >"$work/small.txt"
  "$bin" data prepare --input "$work/small.txt" --output "$work/data" >/dev/null || { echo "FAIL: prepare"; exit 1; }
}

# st_tiny_train_args: sets the array $tiny to the arguments of a quick
# training run on $work/data (st_small_data): a 2-layer, 32-wide GPT, 8
# sequences of 32 tokens a step in micro-batches of 4, one thread, no
# validation, sample or checkpoint before the end, --quiet. Tests append what
# they vary (a later --set of the same key wins).
st_tiny_train_args() {
  tiny=(train --config "$root/configs/shakespeare_char.toml" --quiet
    --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
    --set training.global_batch_size=8 --set training.micro_batch_size=4 --set training.threads=1
    --set training.eval_interval=0 --set training.eval_steps=1 --set training.sample_tokens=0
    --set checkpoint.interval=0
    --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
}

# expect_error "text the message must contain" ARGS...: `scaletrain ARGS`
# must fail with exactly one line on stderr that contains the text.
expect_error() {
  local want=$1
  shift
  if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then
    fail "expected failure: $*"
  elif ! grep -q -- "$want" "$tmp/err"; then
    fail "message for '$*' lacks '$want': $(cat "$tmp/err")"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    fail "more than one error line for '$*': $(cat "$tmp/err")"
  else
    pass=$((pass + 1))
  fi
}

# st_wait_records RUN N [PID]: waits (up to a minute) until RUN/metrics.jsonl
# holds N records; fails sooner if process PID has ended.
st_wait_records() {
  local i
  for i in $(seq 1 1200); do
    [ -f "$1/metrics.jsonl" ] && [ "$(wc -l <"$1/metrics.jsonl")" -ge "$2" ] && return 0
    [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null && return 1
    sleep 0.05
  done
  return 1
}

# st_rank_pid RUN R: the process of world rank R of the job training in RUN
# (found by OpenMPI's environment).
st_rank_pid() {
  local p
  for p in $(pgrep -f "scaletrain train.*$1"); do
    grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$p/environ" 2>/dev/null && { echo "$p"; return; }
  done
}

# Losses (every step) and validation losses of two runs, within TOL relative
# (1e-5 unless given): prints the worst difference, fails above.
# compare REF RUN [FIRST_STEP] [TOL]
compare() {
  $py - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-1}" "${4:-1e-5}" <<'PY'
import json, sys
ref = {j["step"]: j for j in map(json.loads, open(sys.argv[1]))}
run = [json.loads(l) for l in open(sys.argv[2])]
first = int(sys.argv[3])
tol = float(sys.argv[4])
steps = [j["step"] for j in run]
want = [s for s in sorted(ref) if s >= first]
if steps != want:
    print(f"steps {steps}, expected {want}"); sys.exit(1)
worst = 0.0
for j in run:
    r = ref[j["step"]]
    for key in ("loss", "val_loss"):
        if (key in r) != (key in j):
            print(f"step {j['step']}: {key} in one run only"); sys.exit(1)
        if key in r:
            worst = max(worst, abs(j[key] - r[key]) / abs(r[key]))
print(f"worst relative loss difference {worst:.2e} over {len(run)} steps")
sys.exit(0 if worst <= tol else 1)
PY
}

# A `scaletrain train` of the caller's `common` arguments plus ARGS must fail
# with one error line matching PATTERN and leave no run directory behind.
expect_train_error() {  # expect_train_error WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  if "$bin" train "${common[@]}" --set training.global_batch_size=8 "$@" --run-dir "$work/bad" >"$work/out" 2>&1; then
    echo "FAIL: $what was accepted"; fails=$((fails + 1))
  elif grep -q -- "$pattern" "$work/out" && [ "$(grep -c '^error:' "$work/out")" -eq 1 ] && [ ! -e "$work/bad" ]; then
    pass=$((pass + 1))
  else
    echo "FAIL: $what message:"; cat "$work/out"; fails=$((fails + 1))
  fi
}

# st_start_etcd DATA_PREFIX LOG: a one-member etcd on the emulated cluster's
# bridge (10.200.0.254, a random port) in the background, its data in a fresh
# DATA_PREFIX_PORT (a member's data dir pins its peer port); sets $etcd_url and
# $etcd_pid and waits until it answers (returns 1 if it never does).
st_start_etcd() {
  local port=$((23000 + RANDOM % 2000)) _
  local peer=http://127.0.0.1:$((port + 1))
  etcd_url=http://10.200.0.254:$port
  etcd --name st --data-dir "$1_$port" --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "st=$peer" >"$2" 2>&1 &
  etcd_pid=$!
  for _ in $(seq 1 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# st_wait_etcd_host HOST: waits (up to 10 s) until HOST's launcher holds its
# membership key in the etcd at $etcd_url again.
st_wait_etcd_host() {
  local _
  for _ in $(seq 1 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" get --prefix /scaletrain/ --keys-only 2>/dev/null | grep -q "$1" && return 0
    sleep 0.1
  done
  return 1
}
