#!/usr/bin/env bash
# The Python package (pip install ., python/scaletrain): builds the wheel,
# installs it into a fresh virtualenv, and checks (tests/cli/python_api_check.py)
# that plan / search / sweep / validate return exactly the JSON `scaletrain plan
# ... --json` prints for the same inputs, that the catalogs list the names the
# command accepts, that errors are the command's (a misspelt model names the
# nearest), and that read_run reads a run this binary trained and stopped.
# Without PyPI (the build needs scikit-build-core and nanobind) it skips.
# Usage: test_python_api.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"

if ! "$py" -m venv "$work/buildenv" >"$work/venv.log" 2>&1; then
  fail "python3 -m venv: $(tail -1 "$work/venv.log") (Debian: apt-get install python3-venv; scripts/install-deps.sh does)"
  exit 1
fi
# The build requirements pyproject.toml lists, fetched once into a build
# environment; the wheel is then built in it (--no-build-isolation) into a
# build folder kept beside this build's binary, so a second run recompiles
# only what changed.
mapfile -t reqs < <("$py" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$root/pyproject.toml")
if ! "$work/buildenv/bin/pip" install -q --retries 2 --timeout 30 "${reqs[@]}" >"$work/pip.log" 2>&1; then
  echo "SKIP: pip cannot install the build requirements (${reqs[*]}) from PyPI: $(tail -1 "$work/pip.log")"
  exit 0
fi
if ! CMAKE_BUILD_PARALLEL_LEVEL=2 "$work/buildenv/bin/pip" wheel "$root" --no-build-isolation --no-deps \
    -w "$work/dist" --config-settings=build-dir="$(dirname "$bin")/python-wheel" >"$work/wheel.log" 2>&1; then
  fail "pip wheel: $(tail -20 "$work/wheel.log")"
  exit 1
fi
wheel=$(ls "$work"/dist/scaletrain-*.whl)
echo "built $(basename "$wheel")"

# A run to read: a tiny training run stopped by SIGTERM after four steps, as
# a scheduler stops one (exit 75; every rank writes its flight record).
st_small_data 100000
st_tiny_train_args
run=$work/run
"$bin" "${tiny[@]}" --set training.steps=100000 --set telemetry.rank_interval=2 --run-dir "$run" \
  >"$work/train.log" 2>&1 &
pid=$!
if st_wait_records "$run" 4 $pid; then kill -TERM $pid; fi
wait $pid
rc=$?
[ $rc -eq 75 ] || { fail "the training run ended with $rc, not 75 (stopped): $(tail -3 "$work/train.log")"; exit 1; }

# check VENV PANDAS: the checks in a fresh virtualenv with the wheel installed.
check() {
  "$work/$1/bin/pip" install -q --no-index --no-deps "$wheel" >"$work/install.log" 2>&1 ||
    { fail "pip install of the wheel into $1: $(tail -3 "$work/install.log")"; return; }
  # From outside the checkout: the package must plan with the catalogs it ships.
  if out=$(cd "$work" && "$work/$1/bin/python" "$root/tests/cli/python_api_check.py" "$bin" "$root" "$run" "$2" 2>&1); then
    echo "$out"
    pass=$((pass + 1))
  else
    fail "python_api_check.py ($1): $out"
  fi
}
"$py" -m venv "$work/venv"
check venv without-pandas
# pandas from Debian (python3-pandas), seen through the system site packages.
if "$py" -c "import pandas" 2>/dev/null; then
  "$py" -m venv --system-site-packages "$work/venv-pandas"
  check venv-pandas with-pandas
else
  echo "note: Debian's python3 has no pandas (apt-get install python3-pandas): the DataFrame checks did not run"
fi

echo "test_python_api: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
