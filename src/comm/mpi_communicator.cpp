#include "comm/mpi_communicator.h"

// The C API only: the deprecated C++ bindings do not build warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm_state.h"

namespace scaletrain {
namespace {

using Clock = std::chrono::steady_clock;

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

MPI_Datatype ToMpi(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32:
      return MPI_FLOAT;
    case CommDType::kF64:
      return MPI_DOUBLE;
    case CommDType::kI64:
      return MPI_INT64_T;
    case CommDType::kU8:
      return MPI_BYTE;
    case CommDType::kBF16:
    case CommDType::kF16:
      return MPI_UINT16_T;  // reduced by the user operations below
  }
  return MPI_BYTE;
}

// MPI has no 16-bit float types: sum and max of bf16 / f16 (core/half.h) as
// user operations over MPI_UINT16_T, each element widened to float, combined
// and rounded back. Created once, after MPI_Init, on the comm thread.
template <typename H, H (*To)(float), float (*From)(H), bool kMax>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = From(a[i]), y = From(b[i]);
    b[i] = To(kMax ? (x > y ? x : y) : x + y);
  }
}

struct HalfOps {
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL;
};
HalfOps& HalfMpiOps() {
  static HalfOps ops;
  return ops;
}
void CreateHalfMpiOps() {
  HalfOps& o = HalfMpiOps();
  if (o.bf16_sum != MPI_OP_NULL) return;
  MPI_Op_create(&HalfOp<bf16, ToBf16, FromBf16, false>, 1, &o.bf16_sum);
  MPI_Op_create(&HalfOp<bf16, ToBf16, FromBf16, true>, 1, &o.bf16_max);
  MPI_Op_create(&HalfOp<f16, ToF16, FromF16, false>, 1, &o.f16_sum);
  MPI_Op_create(&HalfOp<f16, ToF16, FromF16, true>, 1, &o.f16_max);
}

MPI_Op ToMpiOp(ReduceOp op, CommDType dtype) {
  const bool max = op == ReduceOp::kMax;
  const HalfOps& h = HalfMpiOps();
  if (dtype == CommDType::kBF16) return max ? h.bf16_max : h.bf16_sum;
  if (dtype == CommDType::kF16) return max ? h.f16_max : h.f16_sum;
  return max ? MPI_MAX : MPI_SUM;
}

// MPI has no average: sum, then divide here.
void DivideInPlace(void* buf, int64_t count, CommDType dtype, int n) {
  if (dtype == CommDType::kF32) {
    float* p = static_cast<float*>(buf);
    const float d = static_cast<float>(n);
    for (int64_t i = 0; i < count; ++i) p[i] /= d;
  } else if (dtype == CommDType::kF64) {
    double* p = static_cast<double*>(buf);
    const double d = static_cast<double>(n);
    for (int64_t i = 0; i < count; ++i) p[i] /= d;
  }
}

// Shared by the engine and every CommState it serves, so that neither keeps
// the other alive: a state outliving the engine still has a valid object to
// report to, and the comm thread never drops the engine's last reference.
struct Signals final : internal::CommProgress {
  std::mutex mu;
  std::condition_variable cv;  // wakes the comm thread
  std::atomic<int> waiters{0};
  std::atomic<bool> failed{false};

  void WaitBegin() override {
    {
      std::lock_guard<std::mutex> lock(mu);
      waiters.fetch_add(1);
    }
    cv.notify_all();
  }
  void WaitEnd() override { waiters.fetch_sub(1); }
  void WaitTimedOut(const Status&) override { failed.store(true); }
};

class MpiEngine {
 public:
  struct Work {
    std::shared_ptr<internal::CommState> state;
    // Issues the MPI call; sets *request to MPI_REQUEST_NULL for a call
    // that finished inside (the blocking setup calls).
    std::function<int(MPI_Request*)> start;
    // On the comm thread, after success: scaling, copies, count checks.
    std::function<Status(const MPI_Status&)> finish;
  };

  static Result<std::shared_ptr<MpiEngine>> Acquire();
  ~MpiEngine();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<Signals>& signals() const { return signals_; }
  bool failed() const { return signals_->failed.load(); }
  void set_shutdown_timeout_s(double s) { shutdown_timeout_s_.store(s); }

  void Submit(Work work);
  // Runs `call` (a blocking MPI call) on the comm thread; waits up to
  // timeout_s like any operation.
  Status RunSync(const std::string& what, int64_t step, double timeout_s,
                 std::function<int()> call);
  [[noreturn]] void Abort(int exit_code);

 private:
  // The operations MPI is running for the loop, with the scratch arrays
  // MPI_Testsome fills; reused from turn to turn, since the loop spins while
  // callers wait and must not allocate while it does.
  struct InFlight {
    std::vector<Work> work;
    std::vector<MPI_Request> requests;  // requests[i] is work[i]'s
    std::vector<int> indices;
    std::vector<MPI_Status> statuses;
  };

  MpiEngine();
  void Loop();
  Status InitOnThread();
  // Runs InitOnThread and hands its status to Acquire; false if it failed.
  bool ReportInit();
  // Waits for news, then moves the queue into *fresh; false once the loop
  // should end. Aborts the process when Abort asked for it.
  bool TakeQueuedWork(bool idle, Clock::time_point spin_until, std::vector<Work>* fresh);
  // Issues each fresh operation's MPI call; those still running join *in_flight.
  void StartWork(std::vector<Work>* fresh, InFlight* in_flight);
  // Completes the operations MPI reports finished; true if any did.
  bool CompleteFinishedWork(InFlight* in_flight);
  void Shutdown();

  std::shared_ptr<Signals> signals_ = std::make_shared<Signals>();
  std::thread thread_;
  // Guarded by signals_->mu:
  std::vector<Work> queue_;
  bool stop_ = false;
  int abort_code_ = -1;
  bool init_done_ = false;
  Status init_status_;
  bool thread_exited_ = false;
  std::condition_variable owner_cv_;  // comm thread -> owner: init done, exited

  bool owns_mpi_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  std::chrono::microseconds poll_interval_{100};
  // After it starts or finishes an operation the thread polls without pause
  // for this long before it dozes: the caller often waits right after
  // issuing, and a doze then hands the core away (to the caller, or under
  // load to another process) just when the collective needs it.
  std::chrono::microseconds spin_{200};
  std::atomic<double> shutdown_timeout_s_{Communicator::kDefaultTimeoutS};
};

std::mutex g_engine_mu;
std::weak_ptr<MpiEngine> g_engine;
bool g_engine_created = false;

Result<std::shared_ptr<MpiEngine>> MpiEngine::Acquire() {
  std::lock_guard<std::mutex> lock(g_engine_mu);
  if (auto engine = g_engine.lock()) return engine;
  if (g_engine_created) {
    return FailedPrecondition(
        "MPI was already shut down in this process (its last communicator was destroyed); "
        "create the communicators once and keep them for the whole run");
  }
  g_engine_created = true;
  std::shared_ptr<MpiEngine> engine(new MpiEngine());
  {
    std::unique_lock<std::mutex> wait(engine->signals_->mu);
    engine->owner_cv_.wait(wait, [&] { return engine->init_done_; });
    if (!engine->init_status_.ok()) {
      Status status = engine->init_status_;
      wait.unlock();
      return status;  // the destructor joins the thread, which has returned
    }
  }
  g_engine = engine;
  return engine;
}

MpiEngine::MpiEngine() {
  // OpenMPI's libnbc runs an in-place MPI_Iallreduce on fewer than four ranks
  // as a binomial reduce + broadcast: measured on 2 ranks, 1.3-2x slower
  // than the blocking MPI_Allreduce for 1-25 MiB, while its ring algorithm
  // matches or beats it (bench/comm_overlap.cpp). A user's own setting wins.
  // Set here, before the comm thread exists: setenv is not thread-safe.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
  if (const char* env = std::getenv("SCALETRAIN_COMM_POLL_US")) {
    const long us = std::strtol(env, nullptr, 10);
    if (us >= 0) poll_interval_ = std::chrono::microseconds(us);
  }
  if (const char* env = std::getenv("SCALETRAIN_COMM_SPIN_US")) {
    const long us = std::strtol(env, nullptr, 10);
    if (us >= 0) spin_ = std::chrono::microseconds(us);
  }
  thread_ = std::thread([this] { Loop(); });
}

MpiEngine::~MpiEngine() {
  {
    std::lock_guard<std::mutex> lock(signals_->mu);
    stop_ = true;
  }
  signals_->cv.notify_all();
  // A healthy shutdown may wait long (MPI_Finalize waits for the slowest
  // rank); a failed one must not wait on a thread stuck in MPI.
  std::unique_lock<std::mutex> lock(signals_->mu);
  const auto failed_since_limit = std::chrono::seconds(2);
  Clock::time_point failed_at{};
  while (!thread_exited_) {
    owner_cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (failed()) {
      if (failed_at == Clock::time_point{}) failed_at = Clock::now();
      if (Clock::now() - failed_at > failed_since_limit) break;
    }
  }
  const bool exited = thread_exited_;
  lock.unlock();
  if (exited) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void MpiEngine::Submit(Work work) {
  {
    std::lock_guard<std::mutex> lock(signals_->mu);
    queue_.push_back(std::move(work));
  }
  signals_->cv.notify_all();
}

Status MpiEngine::RunSync(const std::string& what, int64_t step, double timeout_s,
                          std::function<int()> call) {
  auto state = std::make_shared<internal::CommState>();
  state->what = what;
  state->step = step;
  state->timeout_s = timeout_s;
  state->progress = signals_;
  Work work;
  work.state = state;
  work.start = [call = std::move(call)](MPI_Request* request) {
    *request = MPI_REQUEST_NULL;
    return call();
  };
  Submit(std::move(work));
  return CommHandle(state).Wait();
}

void MpiEngine::Abort(int exit_code) {
  std::fflush(nullptr);
  {
    std::lock_guard<std::mutex> lock(signals_->mu);
    abort_code_ = exit_code;
  }
  signals_->cv.notify_all();
  // MPI_Abort runs on the comm thread (FUNNELED); should that thread be
  // stuck inside a blocking MPI call, exiting still makes mpirun end the
  // job, as a rank that exits without MPI_Finalize does.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::_Exit(exit_code);
}

Status MpiEngine::InitOnThread() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return FailedPrecondition("MPI was finalised already in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return Internal("MPI_Init_thread failed: " + MpiErrorString(rc));
    owns_mpi_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      return FailedPrecondition("this MPI library gives no thread support (level " +
                                std::to_string(provided) +
                                "); scaletrain's communication thread needs MPI_THREAD_FUNNELED");
    }
  } else {
    // Someone else's main thread owns MPI; ours is another thread.
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      return FailedPrecondition(
          "MPI was initialised outside scaletrain with thread level " + std::to_string(provided) +
          "; initialise it with MPI_THREAD_SERIALIZED or higher, or let scaletrain do it");
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  CreateHalfMpiOps();
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  return Status::Ok();
}

bool MpiEngine::ReportInit() {
  Status init = InitOnThread();
  const bool init_ok = init.ok();
  {
    std::lock_guard<std::mutex> lock(signals_->mu);
    init_status_ = std::move(init);
    init_done_ = true;
    if (!init_ok) thread_exited_ = true;
  }
  owner_cv_.notify_all();
  return init_ok;
}

bool MpiEngine::TakeQueuedWork(bool idle, Clock::time_point spin_until, std::vector<Work>* fresh) {
  std::unique_lock<std::mutex> lock(signals_->mu);
  auto has_news = [&] { return stop_ || abort_code_ >= 0 || !queue_.empty(); };
  if (idle) {
    signals_->cv.wait(lock, has_news);
  } else if (!has_news() && signals_->waiters.load() == 0 && Clock::now() >= spin_until) {
    // Doze while the caller computes; spin while it waits on us, and
    // for spin_ after news.
    signals_->cv.wait_for(lock, poll_interval_,
                          [&] { return has_news() || signals_->waiters.load() > 0; });
  }
  if (abort_code_ >= 0) {
    const int code = abort_code_;
    lock.unlock();
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  if (stop_ && queue_.empty() && (idle || failed())) return false;
  fresh->swap(queue_);
  return true;
}

void MpiEngine::StartWork(std::vector<Work>* fresh, InFlight* in_flight) {
  for (Work& work : *fresh) {
    work.state->MarkStarted();
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = work.start(&request);
    if (rc != MPI_SUCCESS) {
      work.state->Complete(Internal(MpiErrorString(rc)));
    } else if (request == MPI_REQUEST_NULL) {
      MPI_Status none{};
      work.state->Complete(work.finish ? work.finish(none) : Status::Ok());
    } else {
      in_flight->work.push_back(std::move(work));
      in_flight->requests.push_back(request);
    }
  }
  fresh->clear();
}

bool MpiEngine::CompleteFinishedWork(InFlight* in_flight) {
  std::vector<Work>& active = in_flight->work;
  std::vector<MPI_Request>& requests = in_flight->requests;
  const int n = static_cast<int>(requests.size());
  in_flight->indices.resize(n);
  in_flight->statuses.resize(n);
  int done = 0;
  const int rc = MPI_Testsome(n, requests.data(), &done, in_flight->indices.data(),
                              in_flight->statuses.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // No per-request verdict: every operation in flight has failed.
    for (Work& work : active) work.state->Complete(Internal(MpiErrorString(rc)));
    active.clear();
    requests.clear();
    return false;
  }
  if (done == MPI_UNDEFINED || done == 0) return false;

  for (int k = 0; k < done; ++k) {
    Work& work = active[in_flight->indices[k]];
    const MPI_Status& status = in_flight->statuses[k];
    const int err = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
    if (err != MPI_SUCCESS) {
      work.state->Complete(Internal(MpiErrorString(err)));
    } else {
      work.state->Complete(work.finish ? work.finish(status) : Status::Ok());
    }
    work.state.reset();  // marks the slot for removal
  }
  size_t keep = 0;
  for (size_t i = 0; i < active.size(); ++i) {
    if (!active[i].state) continue;
    if (keep != i) {
      active[keep] = std::move(active[i]);
      requests[keep] = requests[i];
    }
    ++keep;
  }
  active.resize(keep);
  requests.resize(keep);
  return true;
}

void MpiEngine::Loop() {
  if (!ReportInit()) return;
  InFlight in_flight;
  std::vector<Work> fresh;
  // Until then the thread polls MPI without pause (spin_).
  Clock::time_point spin_until{};
  while (TakeQueuedWork(in_flight.work.empty(), spin_until, &fresh)) {
    if (!fresh.empty()) spin_until = Clock::now() + spin_;
    StartWork(&fresh, &in_flight);
    if (in_flight.requests.empty()) continue;
    if (CompleteFinishedWork(&in_flight)) {
      spin_until = Clock::now() + spin_;
    } else {
      // Nothing finished: let another thread of this core run before the
      // next poll. Alone on its core this returns at once (spinning as
      // before); where ranks outnumber cores (an oversubscribed launch, the
      // emulated cluster) a waiting rank's poll no longer takes the CPU from
      // ranks that compute or from the peer it waits for (measured:
      // docs/scaling.md).
      std::this_thread::yield();
    }
  }

  for (Work& work : in_flight.work) {
    work.state->Complete(Internal("the communication layer shut down after an earlier failure"));
  }
  Shutdown();
  {
    std::lock_guard<std::mutex> lock(signals_->mu);
    thread_exited_ = true;
  }
  owner_cv_.notify_all();
}

void MpiEngine::Shutdown() {
  if (!owns_mpi_ || failed()) return;
  // MPI_Finalize waits for every rank; a lost rank would make it wait
  // forever, so first meet the others under the watchdog's limit.
  MPI_Request barrier;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) == MPI_SUCCESS) {
    const double limit_s = shutdown_timeout_s_.load();
    const auto deadline = Clock::now() + std::chrono::duration<double>(limit_s);
    int done = 0;
    while (!done) {
      if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (!done && limit_s > 0 && Clock::now() > deadline) {
        std::fprintf(stderr,
                     "[rank %d] watchdog: the shutdown barrier on group 'world' did not finish "
                     "within %g s: a rank died or hangs; ending the job\n",
                     world_rank_, limit_s);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
        std::_Exit(1);
      }
      if (!done) std::this_thread::sleep_for(poll_interval_);
    }
  }
  MPI_Finalize();
}

// What the MPI call of one operation needs, copied into the work's closures:
// the OpDesc does not outlive Start.
struct MpiCall {
  void* send;  // MPI's C API takes non-const send buffers (MPI-2 bindings); it does not write them.
  void* recv;
  int count;
  MPI_Datatype type;
  CommDType dtype;
  MPI_Op reduce;
  bool average;  // MPI has no average: sum, then divide here
  MPI_Comm comm;
  int rank;
  int size;
  int peer;  // a broadcast's root, a send's or receive's peer
  int tag;
};

// Divides `buf` (count elements) by the group's size once the sum is there.
std::function<Status(const MPI_Status&)> DivideBySize(const MpiCall& c, void* buf) {
  return [c, buf](const MPI_Status&) {
    DivideInPlace(buf, c.count, c.dtype, c.size);
    return Status::Ok();
  };
}

MpiEngine::Work AllreduceWork(const MpiCall& c) {
  MpiEngine::Work work;
  work.start = [c](MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, c.recv, c.count, c.type, c.reduce, c.comm, r);
  };
  if (c.average) work.finish = DivideBySize(c, c.recv);
  return work;
}

MpiEngine::Work ReduceScatterWork(const MpiCall& c) {
  MpiEngine::Work work;
  if (c.send != nullptr) {
    work.start = [c](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(c.send, c.recv, c.count, c.type, c.reduce, c.comm, r);
    };
    if (c.average) work.finish = DivideBySize(c, c.recv);
    return work;
  }
  // MPI's in-place form leaves the result in block 0; move it to this
  // rank's block, where the caller's shard lives.
  work.start = [c](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(MPI_IN_PLACE, c.recv, c.count, c.type, c.reduce, c.comm, r);
  };
  const size_t block_bytes = static_cast<size_t>(c.count * CommDTypeSize(c.dtype));
  work.finish = [c, block_bytes](const MPI_Status&) {
    char* base = static_cast<char*>(c.recv);
    char* mine = base + static_cast<size_t>(c.rank) * block_bytes;
    if (c.rank != 0 && block_bytes > 0) std::memcpy(mine, base, block_bytes);
    if (c.average) DivideInPlace(mine, c.count, c.dtype, c.size);
    return Status::Ok();
  };
  return work;
}

MpiEngine::Work AllgatherWork(const MpiCall& c) {
  MpiEngine::Work work;
  if (c.send != nullptr) {
    work.start = [c](MPI_Request* r) {
      return MPI_Iallgather(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm, r);
    };
  } else {
    work.start = [c](MPI_Request* r) {
      return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c.recv, c.count, c.type, c.comm, r);
    };
  }
  return work;
}

MpiEngine::Work BroadcastWork(const MpiCall& c) {
  MpiEngine::Work work;
  work.start = [c](MPI_Request* r) {
    return MPI_Ibcast(c.recv, c.count, c.type, c.peer, c.comm, r);
  };
  return work;
}

MpiEngine::Work SendWork(const MpiCall& c) {
  MpiEngine::Work work;
  work.start = [c](MPI_Request* r) {
    return MPI_Isend(c.send, c.count, c.type, c.peer, c.tag, c.comm, r);
  };
  return work;
}

// A receive also checks that the sender sent as many elements as it expects.
MpiEngine::Work RecvWork(const MpiCall& c) {
  MpiEngine::Work work;
  work.start = [c](MPI_Request* r) {
    return MPI_Irecv(c.recv, c.count, c.type, c.peer, c.tag, c.comm, r);
  };
  work.finish = [c](const MPI_Status& status) {
    int got = 0;
    MPI_Get_count(&status, c.type, &got);
    if (got != c.count) {
      return DataLoss("received " + std::to_string(got) + " elements, expected " +
                      std::to_string(c.count) + ": the sender's and receiver's sizes differ");
    }
    return Status::Ok();
  };
  return work;
}

MpiEngine::Work BarrierWork(const MpiCall& c) {
  MpiEngine::Work work;
  work.start = [c](MPI_Request* r) { return MPI_Ibarrier(c.comm, r); };
  return work;
}

MpiEngine::Work WorkFor(CommOp op, const MpiCall& c) {
  switch (op) {
    case CommOp::kAllreduce:
      return AllreduceWork(c);
    case CommOp::kReduceScatter:
      return ReduceScatterWork(c);
    case CommOp::kAllgather:
      return AllgatherWork(c);
    case CommOp::kBroadcast:
      return BroadcastWork(c);
    case CommOp::kSend:
      return SendWork(c);
    case CommOp::kRecv:
      return RecvWork(c);
    case CommOp::kBarrier:
      return BarrierWork(c);
  }
  return {};  // not reached: every CommOp has its case
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiEngine> engine, MPI_Comm comm, int rank, int size,
                  std::string name, bool is_world)
      : Communicator(std::move(name)),
        engine_(std::move(engine)),
        comm_(comm),
        rank_(rank),
        size_(size),
        is_world_(is_world) {}

  ~MpiCommunicator() override {
    if (is_world_) {
      engine_->set_shutdown_timeout_s(timeout_s());
    } else if (!engine_->failed()) {
      MPI_Comm comm = comm_;
      Status freed =
          engine_->RunSync("MPI_Comm_free of group '" + name() + "'", step(), timeout_s(),
                           [comm]() mutable { return MPI_Comm_free(&comm); });
      (void)freed;  // nothing left to tell: the group is gone either way
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }

  Result<std::unique_ptr<Communicator>> SplitImpl(int color, int key,
                                                  const std::string& name) override {
    return SplitWith("MPI_Comm_split of group '" + this->name() + "' into '" + name + "'", name,
                     [color, key](MPI_Comm parent, MPI_Comm* out) { return MPI_Comm_split(parent, color, key, out); });
  }

  Result<std::unique_ptr<Communicator>> SplitByHostImpl(const std::string& name) override {
    const int key = rank();
    return SplitWith("MPI_Comm_split_type (shared) of group '" + this->name() + "' into '" + name + "'", name,
                     [key](MPI_Comm parent, MPI_Comm* out) {
                       return MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
                     });
  }

  // A new communicator from `split` (run on the comm thread) of this one.
  template <typename F>
  Result<std::unique_ptr<Communicator>> SplitWith(const std::string& what, const std::string& name, F split) {
    // Owned jointly with the call: should the wait time out, the comm
    // thread may still finish the split later and must write somewhere valid.
    struct SplitResult {
      MPI_Comm comm = MPI_COMM_NULL;
      int rank = 0;
      int size = 0;
    };
    auto result = std::make_shared<SplitResult>();
    MPI_Comm parent = comm_;
    ST_RETURN_IF_ERROR(engine_->RunSync(what, step(), timeout_s(), [parent, split, result]() {
      int rc = split(parent, &result->comm);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(result->comm, &result->rank);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_size(result->comm, &result->size);
      return rc;
    }));
    auto comm = std::make_unique<MpiCommunicator>(engine_, result->comm, result->rank, result->size,
                                                  name, /*is_world=*/false);
    return std::unique_ptr<Communicator>(std::move(comm));
  }

  [[noreturn]] void Abort(int exit_code) override { engine_->Abort(exit_code); }

 protected:
  std::shared_ptr<internal::CommProgress> progress() override { return engine_->signals(); }

  void Start(const OpDesc& op, const std::shared_ptr<internal::CommState>& state) override {
    if (engine_->failed()) {
      state->Complete(
          FailedPrecondition("an earlier operation timed out; the communication layer is stopped"));
      return;
    }
    MpiEngine::Work work = WorkFor(op.op, CallFor(op));
    work.state = state;
    engine_->Submit(std::move(work));
  }

 private:
  MpiCall CallFor(const OpDesc& op) const {
    return MpiCall{.send = const_cast<void*>(op.send),
                   .recv = op.recv,
                   .count = static_cast<int>(op.count),
                   .type = ToMpi(op.dtype),
                   .dtype = op.dtype,
                   .reduce = ToMpiOp(op.reduce, op.dtype),
                   .average = op.reduce == ReduceOp::kAverage,
                   .comm = comm_,
                   .rank = rank_,
                   .size = size_,
                   .peer = op.peer,
                   .tag = op.tag};
  }

  std::shared_ptr<MpiEngine> engine_;
  MPI_Comm comm_;
  int rank_;
  int size_;
  bool is_world_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> CreateMpiWorldCommunicator() {
  ST_ASSIGN_OR_RETURN(std::shared_ptr<MpiEngine> engine, MpiEngine::Acquire());
  const int rank = engine->world_rank();
  const int size = engine->world_size();
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(std::move(engine), MPI_COMM_WORLD, rank, size, "world", true));
}

}  // namespace scaletrain
