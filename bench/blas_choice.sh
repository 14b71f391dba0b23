#!/usr/bin/env bash
# OpenBLAS vs oneDNN sgemm on scaletrain's matmul shapes (see blas_choice.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
dpkg -s libdnnl-dev >/dev/null 2>&1 || apt-get install -y -qq libdnnl-dev >/dev/null
mkdir -p build
ob=/usr/lib/x86_64-linux-gnu/openblas-openmp
g++ -std=c++20 -O3 -march=native -fopenmp bench/blas_choice.cpp -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  -L$ob -Wl,-rpath,$ob -lopenblas -ldnnl -o build/blas_choice
for t in 1 2; do build/blas_choice $t; done
