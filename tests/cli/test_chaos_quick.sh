#!/usr/bin/env bash
# The quick version of the chaos trials (tests/chaos/chaos.sh): one trial of
# each failure, and of the elastic launcher's cases the one that covers most
# (a host lost while a checkpoint is written; tests/cli/test_launch.sh covers
# a host coming back). The long version, 20 or more trials of every case with
# their outcomes in docs/reliability.md, is bench/chaos.sh.
# Usage: test_chaos_quick.sh PATH/TO/scaletrain REPO_ROOT
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; }
exec bash "$2/tests/chaos/chaos.sh" "$1" "$2" --trials 1 \
  --cases kill_rank,kill_mid_save,disk_full,read_only,shard_removed,link_flap,packet_loss,link_down,elastic_mid_save
