#!/usr/bin/env bash
# The quick version of the chaos trials (tests/chaos/chaos.sh): one trial of
# each failure. The long version, 20 or more trials each with their outcomes
# in docs/reliability.md, is bench/chaos.sh.
# Usage: test_chaos_quick.sh PATH/TO/scaletrain REPO_ROOT
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }
exec bash "$2/tests/chaos/chaos.sh" "$1" "$2" --trials 1
