# Sourced by the benchmark scripts (run from the repository root).
# st_build_and_data BUILD_DIR: builds scaletrain there (Release) if missing and
# prepares Tiny Shakespeare beside it; sets $bin and $data_dir.
st_build_and_data() {
  bin="$1/scaletrain"
  if [ ! -x "$bin" ]; then
    echo "building scaletrain (Release) in $1 ..." >&2
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$1" --target scaletrain -j"$(nproc)" >&2
  fi
  data_dir="$1/data/shakespeare_char"
  if [ ! -f "$data_dir/train.bin" ] || [ ! -f "$data_dir/val.bin" ]; then
    echo "preparing Tiny Shakespeare in $data_dir ..." >&2
    "$bin" data prepare --input data/tinyshakespeare.txt --output "$data_dir" >&2
  fi
}

# st_require_steps N: the timed benchmarks drop their first 2 steps (warm-up).
st_require_steps() {
  if [ "$1" -lt 3 ]; then
    echo "error: --steps must be at least 3 (the first 2 steps are dropped)" >&2
    exit 2
  fi
}

# st_require_mpirun: mpirun on PATH, allowed to run as root (it refuses root
# without these variables; they are harmless otherwise).
st_require_mpirun() {
  if ! command -v mpirun >/dev/null; then
    echo "error: mpirun not found; install it: apt-get install openmpi-bin" >&2
    exit 1
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# st_require_torch [gloo]: Debian's python (where python3-torch installs) with
# PyTorch, and with gloo when asked; sets $py.
st_require_torch() {
  py=/usr/bin/python3
  local check='import torch' what=PyTorch
  if [ "${1:-}" = gloo ]; then
    check='import torch, torch.distributed as d; assert d.is_gloo_available()' what="PyTorch with gloo"
  fi
  if ! "$py" -c "$check" 2>/dev/null; then
    echo "error: $what not found for $py; install it: apt-get install python3-torch" >&2
    exit 1
  fi
}
