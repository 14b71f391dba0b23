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
