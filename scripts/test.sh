#!/usr/bin/env bash
# Installs the dependencies, builds with warnings as errors, and runs the
# whole test suite (unit, model-vs-PyTorch reference, command-line tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSCALETRAIN_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
