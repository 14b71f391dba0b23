// The "mpi" backend. All MPI calls of the process are made by one
// communication thread (MPI_THREAD_FUNNELED: it initialises MPI, so it is
// MPI's main thread); callers hand it operations through a queue. The
// thread keeps calling MPI while the caller computes, which is what makes a
// non-blocking collective progress on OpenMPI (its progress engine runs only
// inside MPI calls). bench/comm_overlap.cpp measures the difference.
//
// Polling: while a caller is blocked in Wait() the thread polls without
// pause (the caller's core is idle), and likewise for
// SCALETRAIN_COMM_SPIN_US microseconds (environment, default 200) after it
// starts or finishes an operation; otherwise it polls every
// SCALETRAIN_COMM_POLL_US microseconds (default 100), so that it takes
// little CPU from the compute threads. bench/allreduce_busbw.cpp measured
// the spin (docs/benchmarks.md).
//
// Unless the environment says otherwise, OpenMPI's non-blocking all-reduce
// is set to its ring algorithm (OMPI_MCA_coll_libnbc_iallreduce_algorithm):
// its default for under four ranks, binomial, is up to 2x slower.
//
// Errors are returned, not fatal (MPI_ERRORS_RETURN). After a watchdog
// timeout the process does not call MPI_Finalize (it would wait for the lost
// rank); shutdown otherwise ends with a barrier under the world
// communicator's timeout, then MPI_Finalize.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/status.h"

namespace scaletrain {

// Initialises MPI on first use (with or without mpirun; without, the
// process is a world of one). MPI lives until the last communicator of the
// process is destroyed and cannot be started again after that.
Result<std::unique_ptr<Communicator>> CreateMpiWorldCommunicator();

}  // namespace scaletrain
