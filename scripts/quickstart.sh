#!/usr/bin/env bash
# Installs the dependencies, builds, prepares Tiny Shakespeare and trains the
# default job (configs/shakespeare_char.toml). Extra arguments go to
# `scaletrain train` (e.g. --set training.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target scaletrain
if [ ! -f build/data/shakespeare_char/train.bin ]; then
  build/scaletrain data prepare --input data/tinyshakespeare.txt --output build/data/shakespeare_char
fi
build/scaletrain train --config configs/shakespeare_char.toml "$@"
