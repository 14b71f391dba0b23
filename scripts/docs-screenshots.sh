#!/usr/bin/env bash
# The pictures docs/ shows, rendered in headless Chromium (Debian's
# `chromium`): the report of a clean 2-rank run, the report of one where rank 1
# computes slower (faults.slow_rank), both measured against this machine's
# `scaletrain bench` profile, and the planner's sweep (README.md, "Plan a
# cluster"). tests/cli/test_browser.sh runs it into a scratch folder and checks
# the pages it rendered.
#
# Usage: scripts/docs-screenshots.sh [--bin build/scaletrain] [--out docs/img] [--work DIR]
#   --work DIR keeps the runs, the pages and Chromium's DOM of each (PAGE.dom)
#   there; otherwise they go to a temporary folder, removed at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/scaletrain
out=$root/docs/img
work=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --out) mkdir -p "$2"; out=$(cd "$2" && pwd); shift 2 ;;
    --work) mkdir -p "$2"; work=$(cd "$2" && pwd); shift 2 ;;
    *) echo "error: unknown argument '$1'; use --bin, --out or --work" >&2; exit 2 ;;
  esac
done
command -v chromium >/dev/null || { echo "error: chromium not found (apt-get install chromium)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "error: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# render PAGE PNG WIDTH HEIGHT: the screenshot, and the DOM Chromium built (PAGE.dom).
render() {
  # --no-sandbox: Chromium's sandbox refuses to run as root.
  local flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run)
  chromium "${flags[@]}" --window-size="$3,$4" --screenshot="$2" "file://$1" >/dev/null 2>&1
  chromium "${flags[@]}" --dump-dom "file://$1" >"$1.dom" 2>/dev/null
  [ -s "$2" ] && [ -s "$1.dom" ] || { echo "error: chromium rendered nothing for $1" >&2; exit 1; }
}

# A small model, so that the steps are milliseconds and the run seconds.
"$bin" data prepare --input "$root/data/tinyshakespeare.txt" --output "$work/data" >/dev/null
model=(--set model.n_layer=2 --set model.n_embd=64 --set model.block_size=64
  --set training.global_batch_size=16 --set training.micro_batch_size=8 --set parallel.dp=2
  --set "data.train=\"$work/data/train.bin\"" --set "data.val=\"$work/data/val.bin\"")
train=(train --config "$root/configs/shakespeare_char.toml" --quiet "${model[@]}" --set training.threads=1
  --set training.steps=80 --set training.eval_interval=20 --set training.eval_steps=2
  --set training.sample_tokens=0 --set checkpoint.interval=0 --set telemetry.rank_interval=10)
mpirun -np 2 "$bin" "${train[@]}" --run-dir "$work/clean" >"$work/clean.out" 2>&1
mpirun -np 2 "$bin" "${train[@]}" --set faults.slow_rank=1 --set faults.slow_ms=5 --run-dir "$work/slow" \
  >"$work/slow.out" 2>&1
mpirun -np 2 "$bin" bench --output "$work/hw.toml" --name this-machine --threads 1 --min-seconds 0.05 \
  --max-allreduce-mb 1 --stream-mb 8 --config "$root/configs/shakespeare_char.toml" "${model[@]}" \
  >"$work/bench.out" 2>&1
for run in clean slow; do
  "$bin" report "$work/$run" --hardware "$work/hw.toml" --cluster this-machine >"$work/$run.report" 2>&1
done
"$bin" plan --model gpt2-1.5b --cluster pcie-h100-100gbe --sweep 8,16,32,64,128 --global-batch 128 \
  --plot "$work/sweep.svg" >"$work/sweep.txt"

render "$work/clean/report/index.html" "$out/report-clean.png" 800 3300
render "$work/slow/report/index.html" "$out/report-slow-rank.png" 800 3300
render "$work/sweep.svg" "$out/sweep.png" 1000 540
echo "wrote $out/report-clean.png, $out/report-slow-rank.png, $out/sweep.png"
