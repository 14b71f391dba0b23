#!/usr/bin/env bash
# The docs cannot drift from the program (issue 38): every command block of
# README.md and docs/*.md marked runnable (the line `<!-- runnable -->` just
# before a ```sh fence) runs here and must exit 0, and every block marked
# `<!-- file: PATH -->` must equal the shipped file PATH.
#
# Marked runnable: what runs in seconds with a small model: the README's job
# sections (a run and its report, promtool's check of the shipped
# prometheus.yml, preemption with --resume auto, the planner with bench) and
# docs/'s examples (dp 4 with ZeRO-1, dp x tp x pp on 8 ranks, Llama at tp 4,
# bench and report against the planner, the planner's sweep).
# Not marked, and why: the Quickstart (installs and runs the whole suite),
# building (this test runs the build it is given), servers (Prometheus,
# Grafana, TensorBoard: tests/cli/test_prometheus.sh and test_tensorboard.sh
# run them), other machines (Slurm, a hostfile's hosts) and the emulated
# cluster (root and network namespaces: tests/cli/test_cluster.sh runs it),
# and blocks that show output or placeholders (NAME, my.toml).
#
# How they run: each file's blocks in file order, one `bash -e` each, in a
# fresh scratch directory that looks like the repository's root after the
# Quickstart (configs/, data/, deploy/, scripts/ linked; build/scaletrain;
# the Tiny Shakespeare data in build/data/shakespeare_char). build/scaletrain,
# also `scaletrain` on PATH, is the binary under test behind a wrapper that
# keeps every `train` small (4 layers, 32 wide, context 32, 8 sequences a step
# in micro-batches of 2, at most 20 steps, one thread) and every `bench`
# quick, so that "300 steps of the default model" takes a second. The root
# variables of OpenMPI are not set here: a block that needs them as root must
# say so, as a user's would have to.
# Usage: test_docs.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # the blocks run elsewhere, and build/scaletrain is the wrapper there

# The Quickstart's data, prepared once.
"$bin" data prepare --input "$root/data/tinyshakespeare.txt" --output "$work/fixture/shakespeare_char" >/dev/null ||
  { echo "FAIL: data prepare"; exit 1; }

# The wrapper: later --set flags win, so its own come last.
mkdir -p "$work/wrapper"
cat >"$work/wrapper/scaletrain" <<EOF
#!/usr/bin/env bash
small=(--set model.n_layer=4 --set model.n_embd=32 --set model.block_size=32)
case "\${1:-}" in
  train)
    exec "$bin" "\$@" "\${small[@]}" --set training.global_batch_size=8 --set training.micro_batch_size=2 \\
      --set training.steps=20 --set training.threads=1 --set training.sample_tokens=20 --set training.eval_steps=2 ;;
  bench)
    quick=()
    [[ " \$* " == *" --config "* ]] && quick+=("\${small[@]}")
    [[ " \$* " == *" --min-seconds "* ]] || quick+=(--min-seconds 0.02)
    [[ " \$* " == *" --max-allreduce-mb "* ]] || quick+=(--max-allreduce-mb 1)
    [[ " \$* " == *" --stream-mb "* ]] || quick+=(--stream-mb 8)
    exec "$bin" "\$@" "\${quick[@]}" ;;
  *) exec "$bin" "\$@" ;;
esac
EOF
chmod +x "$work/wrapper/scaletrain"

# run_doc FILE.md: its marked blocks in a fresh scratch root; prints one line
# per block, returns the number that failed.
run_doc() {
  local doc=$1 name counts scratch block rc failed=0
  name=$(basename "$doc" .md)
  counts=$($py "$here/docs_blocks.py" "$doc" "$work/blocks/$name") || { echo "FAIL: $doc: $counts"; return 1; }
  scratch="$work/root-$name"
  mkdir -p "$scratch/build/data"
  for d in configs data deploy scripts docs tests bench; do ln -s "$root/$d" "$scratch/$d"; done
  ln -s "$work/fixture/shakespeare_char" "$scratch/build/data/shakespeare_char"
  ln -s "$work/wrapper/scaletrain" "$scratch/build/scaletrain"
  for block in "$work/blocks/$name"/*.sh; do
    [ -e "$block" ] || continue
    (cd "$scratch" && PATH="$work/wrapper:$PATH" timeout 300 bash -e "$block") >"$block.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      echo "ok $(head -1 "$block" | cut -c3-)"
    else
      echo "FAIL: $(head -1 "$block" | cut -c3-) (exit $rc):"; sed 's/^/    /' "$block"; tail -15 "$block.out"
      failed=$((failed + 1))
    fi
  done
  for block in "$work/blocks/$name"/*.file; do
    [ -e "$block" ] || continue
    if diff <(tail -n +2 "$block") "$root/$(head -1 "$block")" >"$block.diff"; then
      echo "ok $doc shows $(head -1 "$block") as it is"
    else
      echo "FAIL: $doc's copy of $(head -1 "$block") differs:"; cat "$block.diff"
      failed=$((failed + 1))
    fi
  done
  total_blocks=$((total_blocks + ${counts%% *}))
  return $failed
}

# The runner can fail: a marked block that fails is reported.
mkdir -p "$work/broken"
printf '# Broken\n\n<!-- runnable -->\n```sh\nbuild/scaletrain train --config configs/nosuch.toml\n```\n' \
  >"$work/broken/broken.md"
total_blocks=0
if run_doc "$work/broken/broken.md" >"$work/broken.out"; then
  fail "a failing block passed: $(cat "$work/broken.out")"
else
  pass=$((pass + 1))
fi

total_blocks=0
for doc in "$root/README.md" "$root"/docs/*.md; do
  run_doc "$doc"
  n=$?
  [ $n -eq 0 ] && pass=$((pass + 1)) || fails=$((fails + n))
done
# The markers themselves: if they vanished, nothing would run and all would pass.
[ "$total_blocks" -ge 10 ] && pass=$((pass + 1)) || fail "only $total_blocks runnable blocks found (want >= 10)"

echo "$pass passed, $fails failed ($total_blocks runnable blocks)"
[ $fails -eq 0 ]
