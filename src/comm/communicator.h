// Communicator: collectives and point-to-point messages over one group of
// ranks (the world, or a DP, TP or PP group of the mesh). One interface for
// every backend (self, mpi; nccl later), so the layers above never name MPI.
//
// Every operation has a non-blocking form (I...) returning a CommHandle and
// a blocking form that is the non-blocking one plus Wait(). Buffers handed to
// a non-blocking operation belong to it until Wait() or Test() reports it
// finished. Operations of one group must be issued in the same order on every
// member (as in MPI); operations of different groups may be in flight together.
// A communicator is driven by one thread at a time; a handle may be waited
// on from any thread.
//
// Byte accounting. Each operation adds to this communicator's counters, when
// it is issued, its *payload bytes*: the size of the one buffer that holds the
// whole logical data of the operation (the nccl-tests "size" convention):
//   allreduce       the buffer (count elements), in and out
//   reduce_scatter  the input, the full buffer (size() x recv_count elements)
//   allgather       the output, the full buffer (size() x send_count elements)
//   broadcast       the buffer (count elements), on the root and on receivers
//   send / recv     the message (count elements), on the sender / receiver
//   barrier         0 bytes (counted as a call)
// RingEquivalentBytes() turns a payload figure into what a bandwidth-optimal
// ring moves out of each rank (2(n-1)/n x payload for allreduce), the figure
// the planner's communication model uses.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/host_probe.h"
#include "core/half.h"
#include "core/status.h"

namespace scaletrain {

enum class ReduceOp { kSum, kAverage, kMax };
const char* ReduceOpName(ReduceOp op);

enum class CommOp { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kSend, kRecv, kBarrier };
inline constexpr int kNumCommOps = 7;
const char* CommOpName(CommOp op);  // "allreduce", "reduce_scatter", ...

// Element types a communicator moves. Reductions take kF32, kF64, kI64 and
// the 16-bit floats kBF16, kF16 (core/half.h; each partial sum rounded to
// 16 bits, as NCCL does); kAverage only kF32 and kF64; kU8 (raw bytes) only
// moves.
enum class CommDType { kF32, kF64, kI64, kU8, kBF16, kF16 };
const char* CommDTypeName(CommDType dtype);
int64_t CommDTypeSize(CommDType dtype);

template <typename T>
struct CommDTypeOf;
template <>
struct CommDTypeOf<float> {
  static constexpr CommDType value = CommDType::kF32;
};
template <>
struct CommDTypeOf<double> {
  static constexpr CommDType value = CommDType::kF64;
};
template <>
struct CommDTypeOf<int64_t> {
  static constexpr CommDType value = CommDType::kI64;
};
template <>
struct CommDTypeOf<uint8_t> {
  static constexpr CommDType value = CommDType::kU8;
};
template <>
struct CommDTypeOf<bf16> {
  static constexpr CommDType value = CommDType::kBF16;
};
template <>
struct CommDTypeOf<f16> {
  static constexpr CommDType value = CommDType::kF16;
};

// Bytes a bandwidth-optimal ring sends out of each rank of an n-rank group
// for an operation with the given payload figure (see above): allreduce
// 2(n-1)/n, reduce_scatter and allgather (n-1)/n, broadcast (n-1)/n (each
// rank forwards the data once, bar the last of the chain), send/recv 1,
// barrier 0. Zero for n = 1, when nothing leaves the rank.
double RingEquivalentBytes(CommOp op, int64_t group_size, int64_t payload_bytes);

struct CommOpStats {
  int64_t calls = 0;
  int64_t payload_bytes = 0;
};

struct CommStats {
  std::array<CommOpStats, kNumCommOps> ops{};
  // Time callers spent blocked in Wait() on this group's handles: the
  // exposed (not overlapped) communication time.
  double wait_s = 0;

  const CommOpStats& of(CommOp op) const { return ops[static_cast<int>(op)]; }
  int64_t calls() const;
  int64_t payload_bytes() const;
  // Sum of RingEquivalentBytes over the operations counted.
  double ring_equivalent_bytes(int64_t group_size) const;
};

namespace internal {
struct CommState;
struct CommCounters;
class CommProgress;
}  // namespace internal

// The result of a non-blocking operation. Copyable; all copies refer to the
// same operation. A default-constructed handle is an operation that is done.
class [[nodiscard]] CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<internal::CommState> state);

  // Blocks until the operation finishes, or until the communicator's
  // timeout (counted from this call) passes. The timeout is the watchdog: a
  // peer that died or hangs shows up here as an error naming the operation,
  // the group and the step. The job cannot go on after it (the operation
  // still owns its buffers): report it, then Communicator::Abort. (A plain
  // non-zero exit also ends the job under mpirun's default policy, not
  // under --enable-recovery, where a hung rank would keep it alive.)
  Status Wait();
  // As Wait(), with this timeout in seconds; <= 0 waits without limit.
  Status Wait(double timeout_s);
  // True once the operation has finished (Wait() then returns at once).
  bool Test() const;

  // When the backend started the operation and when it finished (steady
  // clock); both the issue time until then. For traces.
  std::chrono::steady_clock::time_point issue_time() const;
  std::chrono::steady_clock::time_point start_time() const;
  std::chrono::steady_clock::time_point end_time() const;

 private:
  std::shared_ptr<internal::CommState> state_;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "self", "mpi"
  // The group's role: "world", "dp", "tp", "pp".
  const std::string& name() const { return name_; }

  // The step the caller is in, named by watchdog errors.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  // Watchdog limit for Wait() without an explicit timeout; <= 0: none.
  void set_timeout_s(double timeout_s) { timeout_s_ = timeout_s; }
  // The group's other members (world rank, host) and this rank's host: when
  // the watchdog fires it probes the peers' hosts and says which, if any, no
  // longer answers on the network (comm/host_probe.h).
  void SetPeers(GroupPeers peers, std::string self_host) {
    peers_ = std::make_shared<const GroupPeers>(std::move(peers));
    self_host_ = std::move(self_host);
  }
  double timeout_s() const { return timeout_s_; }
  static constexpr double kDefaultTimeoutS = 300;

  // Counters since construction or the last reset (see the top of the file).
  CommStats stats() const;
  void ResetStats();
  // stats() and ResetStats() in one, for per-step reporting.
  CommStats TakeStats();

  // In place: every rank ends with the element-wise reduction of all ranks'
  // buffers.
  template <typename T>
  CommHandle IAllreduce(T* buf, int64_t count, ReduceOp op = ReduceOp::kSum) {
    return Issue({CommOp::kAllreduce, CommDTypeOf<T>::value, op, buf, buf, count, 0, 0});
  }
  // `send` holds size() blocks of recv_count elements; rank r receives in
  // `recv` the reduction of block r. The buffers must not overlap.
  template <typename T>
  CommHandle IReduceScatter(const T* send, T* recv, int64_t recv_count,
                            ReduceOp op = ReduceOp::kSum) {
    return Issue({CommOp::kReduceScatter, CommDTypeOf<T>::value, op, send, recv, recv_count, 0, 0});
  }
  // In place, as ZeRO uses it on the flat gradient buffer: `buf` holds
  // size() blocks of block_count elements; block rank() ends as the
  // reduction, the other blocks are left undefined (MPI's scratch).
  template <typename T>
  CommHandle IReduceScatterInPlace(T* buf, int64_t block_count, ReduceOp op = ReduceOp::kSum) {
    return Issue(
        {CommOp::kReduceScatter, CommDTypeOf<T>::value, op, nullptr, buf, block_count, 0, 0});
  }
  // `recv` gets size() blocks of send_count elements, block r from rank r.
  // The buffers must not overlap.
  template <typename T>
  CommHandle IAllgather(const T* send, T* recv, int64_t send_count) {
    return Issue(
        {CommOp::kAllgather, CommDTypeOf<T>::value, ReduceOp::kSum, send, recv, send_count, 0, 0});
  }
  // In place: block rank() of `buf` is this rank's contribution.
  template <typename T>
  CommHandle IAllgatherInPlace(T* buf, int64_t block_count) {
    return Issue({CommOp::kAllgather, CommDTypeOf<T>::value, ReduceOp::kSum, nullptr, buf,
                  block_count, 0, 0});
  }
  template <typename T>
  CommHandle IBroadcast(T* buf, int64_t count, int root) {
    return Issue(
        {CommOp::kBroadcast, CommDTypeOf<T>::value, ReduceOp::kSum, buf, buf, count, root, 0});
  }
  // Point to point within the group; `peer` is a rank of this group. A
  // group of one has no peer (self backend), so pipelines of one stage
  // must not send.
  template <typename T>
  CommHandle ISend(const T* buf, int64_t count, int peer, int tag = 0) {
    return Issue(
        {CommOp::kSend, CommDTypeOf<T>::value, ReduceOp::kSum, buf, nullptr, count, peer, tag});
  }
  template <typename T>
  CommHandle IRecv(T* buf, int64_t count, int peer, int tag = 0) {
    return Issue(
        {CommOp::kRecv, CommDTypeOf<T>::value, ReduceOp::kSum, nullptr, buf, count, peer, tag});
  }
  CommHandle IBarrier() {
    return Issue({CommOp::kBarrier, CommDType::kU8, ReduceOp::kSum, nullptr, nullptr, 0, 0, 0});
  }

  template <typename T>
  Status Allreduce(T* buf, int64_t count, ReduceOp op = ReduceOp::kSum) {
    return IAllreduce(buf, count, op).Wait();
  }
  template <typename T>
  Status ReduceScatter(const T* send, T* recv, int64_t recv_count, ReduceOp op = ReduceOp::kSum) {
    return IReduceScatter(send, recv, recv_count, op).Wait();
  }
  template <typename T>
  Status ReduceScatterInPlace(T* buf, int64_t block_count, ReduceOp op = ReduceOp::kSum) {
    return IReduceScatterInPlace(buf, block_count, op).Wait();
  }
  template <typename T>
  Status Allgather(const T* send, T* recv, int64_t send_count) {
    return IAllgather(send, recv, send_count).Wait();
  }
  template <typename T>
  Status AllgatherInPlace(T* buf, int64_t block_count) {
    return IAllgatherInPlace(buf, block_count).Wait();
  }
  template <typename T>
  Status Broadcast(T* buf, int64_t count, int root) {
    return IBroadcast(buf, count, root).Wait();
  }
  template <typename T>
  Status Send(const T* buf, int64_t count, int peer, int tag = 0) {
    return ISend(buf, count, peer, tag).Wait();
  }
  template <typename T>
  Status Recv(T* buf, int64_t count, int peer, int tag = 0) {
    return IRecv(buf, count, peer, tag).Wait();
  }
  Status Barrier() { return IBarrier().Wait(); }

  // A new communicator over the ranks of this group that pass the same
  // `color` (>= 0), ranked by `key` (ties by rank here): MPI_Comm_split.
  // Every member must call it, in the same order relative to other
  // operations. The new group starts with this one's step and timeout.
  Result<std::unique_ptr<Communicator>> Split(int color, int key, const std::string& name);
  // The members of this group on this rank's host (MPI_Comm_split_type with
  // MPI_COMM_TYPE_SHARED), ranked as here. Collective, like Split.
  Result<std::unique_ptr<Communicator>> SplitByHost(const std::string& name);

  // Ends the whole job, every rank of every group, with this exit code; for
  // a watchdog error after it has been reported.
  [[noreturn]] virtual void Abort(int exit_code) = 0;

  // One operation as the backends see it. `count` is the element count of
  // the op's signature (recv_count, send_count, count); `peer` the root of a
  // broadcast or the peer of a send/recv. The in-place forms of
  // reduce_scatter and allgather have send == nullptr and recv the full
  // buffer; allreduce and broadcast have send == recv.
  struct OpDesc {
    CommOp op;
    CommDType dtype;
    ReduceOp reduce;
    const void* send;
    void* recv;
    int64_t count;
    int peer;
    int tag;
  };

 protected:
  explicit Communicator(std::string name);

  virtual Result<std::unique_ptr<Communicator>> SplitImpl(int color, int key,
                                                          const std::string& name) = 0;
  virtual Result<std::unique_ptr<Communicator>> SplitByHostImpl(const std::string& name) = 0;
  // Starts a validated operation; the state is already counted and carries
  // the description watchdog errors use. Must eventually complete `state`.
  virtual void Start(const OpDesc& op, const std::shared_ptr<internal::CommState>& state) = 0;
  // The backend's observer of waiting callers, given to every new state.
  virtual std::shared_ptr<internal::CommProgress> progress() { return nullptr; }

 private:
  CommHandle Issue(const OpDesc& op);
  Status Validate(const OpDesc& op) const;

  std::string name_;
  std::atomic<int64_t> seq_{0};  // operations issued on this group: the flight recorder's sequence number
  int64_t step_ = -1;
  double timeout_s_ = kDefaultTimeoutS;
  std::shared_ptr<const GroupPeers> peers_;
  std::string self_host_;
  std::shared_ptr<internal::CommCounters> counters_;
};

// The communicator over all launched ranks. backend "self": a world of one;
// "mpi": MPI_COMM_WORLD (initialising MPI on first use; a process started
// without mpirun is a world of one).
Result<std::unique_ptr<Communicator>> CreateWorldCommunicator(const std::string& backend);

}  // namespace scaletrain
