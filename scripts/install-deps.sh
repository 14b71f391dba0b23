#!/usr/bin/env bash
# Installs what scaletrain needs to build, run and test on Debian 12 (as root).
# Used by the README's Quickstart and by .ci/run.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev libdnnl-dev
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev libcpp-httplib-dev
  # byte-level BPE: GPT-2's pre-tokenizer pattern (Unicode classes) runs in PCRE2
  libpcre2-dev
  # TensorBoard event files: Event/Summary protobufs
  libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev
  libopenmpi-dev openmpi-bin
  # the Slurm requeue test runs a real one-node cluster (scripts/slurm/local-cluster.sh),
  # the Prometheus test a real server scraping a training run
  slurm-wlm munge prometheus
  # the emulated cluster (scripts/cluster.sh: network namespaces, a bridge, tc; vde2's
  # wirefilter for link delay, jitter and loss)
  iproute2 vde2
  # the elastic launcher's membership and leader (scaletrain launch --etcd; tests/cli/test_launch.sh)
  etcd-server etcd-client
  # the report and the sweep plot as a browser shows them (tests/cli/test_browser.sh,
  # scripts/docs-screenshots.sh: headless Chromium)
  chromium
  # reference checks (PyTorch on the CPU) and the benchmarks
  python3 python3-numpy python3-torch python3-pip
  # the Python package (pip install ., tests/cli/test_python_api.sh): its headers, a fresh
  # virtualenv to install it into, pandas for read_run's DataFrames (scikit-build-core and
  # nanobind come from PyPI, as pyproject.toml's build requirements)
  python3-dev python3-venv python3-pandas
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The Kubernetes manifest's check (tests/cli/test_k8s_manifest.sh): PyPI's kubernetes-validate.
if ! command -v kubernetes-validate >/dev/null; then
  python3 -m pip install -q kubernetes-validate 2>/dev/null ||
    python3 -m pip install -q --break-system-packages kubernetes-validate ||
    echo "warning: could not install kubernetes-validate from PyPI; its test will skip" >&2
fi
# The byte-level BPE test (tests/cli/test_bpe_cli.sh) and bench/bpe_train.sh compare with
# Hugging Face's tokenizers (pinned: its trainer's output is part of what they check).
if ! python3 -c "import tokenizers" 2>/dev/null; then
  python3 -m pip install -q tokenizers==0.23.3 2>/dev/null ||
    python3 -m pip install -q --break-system-packages tokenizers==0.23.3 ||
    echo "warning: could not install tokenizers from PyPI; the BPE comparison will skip" >&2
fi
# The TensorBoard test (tests/cli/test_tensorboard.sh) reads the event files back with
# the tensorboard package's own reader, into Debian's python3.
if ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q tensorboard 2>/dev/null ||
    /usr/bin/python3 -m pip install -q --break-system-packages tensorboard ||
    echo "warning: could not install tensorboard from PyPI; its test will skip" >&2
fi
# The Hugging Face interop tests (tests/unit/test_hf_interop.cpp, tests/cli/test_hf_interop.sh):
# transformers, pinned to a release that runs on Debian's torch 1.13, into Debian's python3
# (where python3-torch is); tests/requirements.txt lists it.
if ! /usr/bin/python3 -c "import transformers" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q -r "$(dirname "$0")/../tests/requirements.txt" 2>/dev/null ||
    /usr/bin/python3 -m pip install -q --break-system-packages -r "$(dirname "$0")/../tests/requirements.txt" ||
    echo "warning: could not install transformers from PyPI; the Hugging Face checks will skip" >&2
fi
