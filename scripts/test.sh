#!/usr/bin/env bash
# Installs the dependencies, builds with warnings as errors, and runs the
# whole test suite (unit, model-vs-PyTorch reference, multi-rank MPI,
# command-line tests); then the unit tests of the engine once more under
# AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSCALETRAIN_WERROR=ON >/dev/null
cmake --build build -j"$jobs"

# The CUDA backend: built wherever the CUDA toolkit is installed (its GPU
# tests skip, saying so, on a machine without a GPU).
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DSCALETRAIN_CUDA=ON -DSCALETRAIN_WERROR=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
  cmake --build build-cuda -j"$jobs" --target st_kernels_cuda test_cuda_host test_cuda_ops gpu_calibrate
  build-cuda/tests/test_cuda_host
  build-cuda/tests/test_cuda_ops
  # The GPU calibration with every device hidden: one line saying it skipped, exit 77.
  bash tests/cli/gpu_calibrate_fake_run.sh build/scaletrain "$PWD" build-cuda/bench/gpu_calibrate --no-device-only
else
  echo "CUDA toolkit not found (no nvcc): the CUDA backend was not built"
fi

ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900

# Sanitizers: the engine's unit tests (the planner's arithmetic and the
# multi-process tests run in the main pass only, to keep CI time down), and
# the replay of every fuzz seed and regression input (tests/fuzz): ctest
# registers fuzz.replay_* in this build too, so they must be built here.
asan_targets=(test_config test_kernels test_kernels_llama test_model test_recompute test_split_backward test_data test_bpe test_checkpoint_io test_trainer
              test_mesh test_comm_self test_report test_report_flight test_rebalance test_prometheus
              test_hf_interop
              fuzz_replay_run_config fuzz_replay_vocab fuzz_replay_token_shard
              fuzz_replay_safetensors fuzz_replay_checkpoint_manifest fuzz_replay_plan_csv
              fuzz_replay_hardware_catalog fuzz_replay_hf_merges fuzz_replay_stack_file test_tensorboard)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSCALETRAIN_SANITIZE=ON \
  -DSCALETRAIN_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs" --target "${asan_targets[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 \
  -E '_NOT_BUILT|^cli\.|^mpi\.|LearnsShakespeare'

