#!/usr/bin/env bash
# Runs one MPI rank's command and prints its exit code, so a test can see
# every rank's code where mpirun reports only one (or none).
"$@"
rc=$?
echo "rank ${OMPI_COMM_WORLD_RANK:-?} exit code $rc"
exit $rc
