#include "comm/communicator.h"

#include <climits>
#include <cstdio>
#include <utility>

#include "comm/comm_state.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"

namespace scaletrain {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kAllreduce:
      return "allreduce";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllgather:
      return "allgather";
    case CommOp::kBroadcast:
      return "broadcast";
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
    case CommOp::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* CommDTypeName(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32:
      return "float32";
    case CommDType::kF64:
      return "float64";
    case CommDType::kI64:
      return "int64";
    case CommDType::kU8:
      return "uint8";
    case CommDType::kBF16:
      return "bfloat16";
    case CommDType::kF16:
      return "float16";
  }
  return "?";
}

int64_t CommDTypeSize(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32:
      return 4;
    case CommDType::kF64:
      return 8;
    case CommDType::kI64:
      return 8;
    case CommDType::kU8:
      return 1;
    case CommDType::kBF16:
    case CommDType::kF16:
      return 2;
  }
  return 0;
}

double RingEquivalentBytes(CommOp op, int64_t group_size, int64_t payload_bytes) {
  if (group_size <= 1) return 0;
  const double n = static_cast<double>(group_size);
  const double bytes = static_cast<double>(payload_bytes);
  switch (op) {
    case CommOp::kAllreduce:
      return 2 * (n - 1) / n * bytes;
    case CommOp::kReduceScatter:
    case CommOp::kAllgather:
    case CommOp::kBroadcast:
      return (n - 1) / n * bytes;
    case CommOp::kSend:
    case CommOp::kRecv:
      return bytes;
    case CommOp::kBarrier:
      return 0;
  }
  return 0;
}

int64_t CommStats::calls() const {
  int64_t total = 0;
  for (const CommOpStats& s : ops) total += s.calls;
  return total;
}

int64_t CommStats::payload_bytes() const {
  int64_t total = 0;
  for (const CommOpStats& s : ops) total += s.payload_bytes;
  return total;
}

double CommStats::ring_equivalent_bytes(int64_t group_size) const {
  double total = 0;
  for (int i = 0; i < kNumCommOps; ++i) {
    // A recv is the other end of a send: count the bytes leaving this rank.
    if (static_cast<CommOp>(i) == CommOp::kRecv) continue;
    total += RingEquivalentBytes(static_cast<CommOp>(i), group_size, ops[i].payload_bytes);
  }
  return total;
}

// --- CommHandle ---

CommHandle::CommHandle(std::shared_ptr<internal::CommState> state) : state_(std::move(state)) {}

Status CommHandle::Wait() {
  if (!state_) return Status::Ok();
  return Wait(state_->timeout_s);
}

// How long the watchdog waits for each peer host's answer to its probe.
constexpr double kPeerProbeS = 1.0;

Status CommHandle::Wait(double timeout_s) {
  if (!state_) return Status::Ok();
  internal::CommState& s = *state_;
  if (s.done.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(s.mu);
    return s.status;
  }
  if (s.progress) s.progress->WaitBegin();
  const auto t0 = std::chrono::steady_clock::now();
  bool finished;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    auto is_done = [&s] { return s.done.load(std::memory_order_acquire); };
    if (timeout_s > 0) {
      finished = s.cv.wait_for(lock, std::chrono::duration<double>(timeout_s), is_done);
    } else {
      s.cv.wait(lock, is_done);
      finished = true;
    }
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  if (s.counters) {
    s.counters->wait_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
        std::memory_order_relaxed);
  }
  if (s.progress) s.progress->WaitEnd();
  if (!finished) {
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", timeout_s);
    // Whether the peers' hosts still answer tells a cut link from a lost rank.
    const std::string why = s.peers ? PeerReachReport(*s.peers, s.self_host, kPeerProbeS)
                                    : ": a rank of the group died or hangs";
    Status timed_out =
        Internal("watchdog: " + s.what + " did not finish within " + limit + " s at step " +
                 std::to_string(s.step) + why +
                 "; ending the job (raise the limit if a step legitimately takes longer)");
    // Each rank's last operations, for `scaletrain report` to find where the job stuck.
    if (FlightRecorder::Get().enabled()) (void)FlightRecorder::Get().Dump(timed_out.message());
    if (s.progress) s.progress->WaitTimedOut(timed_out);
    return timed_out;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  return s.status;
}

bool CommHandle::Test() const { return !state_ || state_->done.load(std::memory_order_acquire); }

std::chrono::steady_clock::time_point CommHandle::issue_time() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->issue_time;
}

std::chrono::steady_clock::time_point CommHandle::start_time() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->start_time;
}

std::chrono::steady_clock::time_point CommHandle::end_time() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->end_time;
}

// --- Communicator ---

Communicator::Communicator(std::string name)
    : name_(std::move(name)), counters_(std::make_shared<internal::CommCounters>()) {}

Communicator::~Communicator() = default;

CommStats Communicator::stats() const {
  CommStats out;
  for (int i = 0; i < kNumCommOps; ++i) {
    out.ops[i].calls = counters_->calls[i].load(std::memory_order_relaxed);
    out.ops[i].payload_bytes = counters_->payload_bytes[i].load(std::memory_order_relaxed);
  }
  out.wait_s = static_cast<double>(counters_->wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  return out;
}

void Communicator::ResetStats() { TakeStats(); }

CommStats Communicator::TakeStats() {
  CommStats out;
  for (int i = 0; i < kNumCommOps; ++i) {
    out.ops[i].calls = counters_->calls[i].exchange(0, std::memory_order_relaxed);
    out.ops[i].payload_bytes = counters_->payload_bytes[i].exchange(0, std::memory_order_relaxed);
  }
  out.wait_s =
      static_cast<double>(counters_->wait_ns.exchange(0, std::memory_order_relaxed)) * 1e-9;
  return out;
}

namespace {

bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

// The payload figure the header defines, per operation.
int64_t PayloadBytes(const Communicator::OpDesc& op, int group_size) {
  const int64_t elem = CommDTypeSize(op.dtype);
  switch (op.op) {
    case CommOp::kReduceScatter:
    case CommOp::kAllgather:
      return op.count * group_size * elem;
    case CommOp::kBarrier:
      return 0;
    default:
      return op.count * elem;
  }
}

// Reduce-scatter and allgather: one side's buffer holds a block per rank.
bool IsBlocked(CommOp op) { return op == CommOp::kReduceScatter || op == CommOp::kAllgather; }

bool Reduces(CommOp op) { return op == CommOp::kAllreduce || op == CommOp::kReduceScatter; }

// MPI counts are ints; the full buffer of reduce_scatter/allgather too.
Status CheckElementCount(const Communicator::OpDesc& op, int group_size) {
  if (op.count < 0) {
    return InvalidArgument("negative element count " + std::to_string(op.count));
  }
  const int64_t total =
      op.count > INT_MAX ? op.count : (IsBlocked(op.op) ? op.count * group_size : op.count);
  if (total > INT_MAX) {
    return InvalidArgument(std::to_string(total) +
                           " elements exceed the 2^31-1 an MPI call takes; split the buffer");
  }
  return Status::Ok();
}

Status CheckReductionDtype(const Communicator::OpDesc& op) {
  if (!Reduces(op.op)) return Status::Ok();
  if (op.dtype == CommDType::kU8) {
    return InvalidArgument("cannot reduce raw bytes; use float32, float64 or int64");
  }
  if (op.reduce == ReduceOp::kAverage && op.dtype != CommDType::kF32 && op.dtype != CommDType::kF64) {
    return InvalidArgument(std::string("average of ") + CommDTypeName(op.dtype) +
                           " is not supported (int64 would truncate, 16-bit floats lose the division's precision); sum and divide instead");
  }
  return Status::Ok();
}

// Every buffer the operation reads or writes is there (none is needed for
// zero elements).
Status CheckBuffersGiven(const Communicator::OpDesc& op) {
  if (op.count == 0) return Status::Ok();
  const bool needs_send = op.op == CommOp::kSend || (IsBlocked(op.op) && op.send != nullptr);
  if (op.recv == nullptr && op.op != CommOp::kSend) return InvalidArgument("null buffer");
  if (needs_send && op.send == nullptr) return InvalidArgument("null buffer");
  return Status::Ok();
}

// A broadcast's root, a send's or receive's peer and tag.
Status CheckPeerAndTag(const Communicator::OpDesc& op, int group_size) {
  const bool point_to_point = op.op == CommOp::kSend || op.op == CommOp::kRecv;
  if (op.op != CommOp::kBroadcast && !point_to_point) return Status::Ok();
  if (op.peer < 0 || op.peer >= group_size) {
    const char* role = op.op == CommOp::kBroadcast ? "root" : "peer";
    return InvalidArgument(std::string(role) + " " + std::to_string(op.peer) +
                           " is not a rank of this group of " + std::to_string(group_size));
  }
  if (point_to_point && (op.tag < 0 || op.tag > 32767)) {
    // 32767 is the smallest tag bound MPI guarantees.
    return InvalidArgument("tag " + std::to_string(op.tag) + " outside [0, 32767]");
  }
  return Status::Ok();
}

// The out-of-place forms of reduce_scatter and allgather: the full buffer
// (a block per rank) and this rank's block may not share memory.
Status CheckSendRecvDisjoint(const Communicator::OpDesc& op, int group_size) {
  if (!IsBlocked(op.op) || op.send == nullptr || op.count == 0) return Status::Ok();
  const int64_t block_bytes = op.count * CommDTypeSize(op.dtype);
  const int64_t full_bytes = block_bytes * group_size;
  const bool scatters = op.op == CommOp::kReduceScatter;
  if (Overlap(op.send, scatters ? full_bytes : block_bytes, op.recv,
              scatters ? block_bytes : full_bytes)) {
    return InvalidArgument("send and recv buffers overlap; use the InPlace form");
  }
  return Status::Ok();
}

}  // namespace

Status Communicator::Validate(const OpDesc& op) const {
  ST_RETURN_IF_ERROR(CheckElementCount(op, size()));
  ST_RETURN_IF_ERROR(CheckReductionDtype(op));
  ST_RETURN_IF_ERROR(CheckBuffersGiven(op));
  ST_RETURN_IF_ERROR(CheckPeerAndTag(op, size()));
  return CheckSendRecvDisjoint(op, size());
}

CommHandle Communicator::Issue(const OpDesc& op) {
  auto state = std::make_shared<internal::CommState>();
  state->step = step_;
  state->timeout_s = timeout_s_;
  state->counters = counters_;
  state->progress = progress();
  state->peers = peers_;
  state->self_host = self_host_;

  const int64_t payload = PayloadBytes(op, size());
  std::string what = CommOpName(op.op);
  if (op.op != CommOp::kBarrier) {
    what += " of " + std::to_string(payload) + " bytes (" + CommDTypeName(op.dtype);
    if (op.op == CommOp::kAllreduce || op.op == CommOp::kReduceScatter) {
      what += std::string(", ") + ReduceOpName(op.reduce);
    }
    if (op.op == CommOp::kBroadcast) what += ", root " + std::to_string(op.peer);
    if (op.op == CommOp::kSend) what += ", to " + std::to_string(op.peer);
    if (op.op == CommOp::kRecv) what += ", from " + std::to_string(op.peer);
    what += ")";
  }
  what += " on group '" + name_ + "' (rank " + std::to_string(rank()) + " of " +
          std::to_string(size()) + ")";
  state->what = std::move(what);

  Status valid = Validate(op);
  if (!valid.ok()) {
    // Not counted: nothing was handed to the backend.
    state->Complete(valid);
    return CommHandle(std::move(state));
  }
  const int index = static_cast<int>(op.op);
  state->flight_id = FlightRecorder::Get().Record(name_, seq_++, op, payload, step_, rank(), size());
  counters_->calls[index].fetch_add(1, std::memory_order_relaxed);
  counters_->payload_bytes[index].fetch_add(payload, std::memory_order_relaxed);
  Start(op, state);
  return CommHandle(std::move(state));
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key,
                                                          const std::string& name) {
  if (color < 0) {
    return InvalidArgument("split of group '" + name_ + "' into '" + name +
                           "': colour must be >= 0, got " + std::to_string(color));
  }
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, SplitImpl(color, key, name));
  child->set_step(step_);
  child->set_timeout_s(timeout_s_);
  return child;
}

Result<std::unique_ptr<Communicator>> Communicator::SplitByHost(const std::string& name) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, SplitByHostImpl(name));
  child->set_step(step_);
  child->set_timeout_s(timeout_s_);
  return child;
}

Result<std::unique_ptr<Communicator>> CreateWorldCommunicator(const std::string& backend) {
  if (backend == "self") return CreateSelfCommunicator("world");
  if (backend == "mpi") return CreateMpiWorldCommunicator();
  return InvalidArgument("unknown communication backend '" + backend +
                         "'; valid backends: self, mpi");
}

}  // namespace scaletrain
