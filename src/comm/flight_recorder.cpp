#include "comm/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

namespace scaletrain {

namespace {

int64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

enum SlotState : int { kInFlight = 1, kDone = 2, kFailed = 3 };

// Plain fields, written by the issuing thread before `id` publishes the
// slot; the times and state are atomics the backend's thread sets. A dump
// from a signal handler reads without locks (a slot being rewritten at that
// moment may come out torn: acceptable for a post-mortem).
struct Slot {
  std::atomic<int64_t> id{-1};
  char group[32] = {};
  int64_t seq = 0, bytes = 0, step = 0;
  int op = 0, dtype = 0, peer = -1, group_rank = 0, group_size = 0;
  std::atomic<int64_t> issued_ns{0}, started_ns{0}, ended_ns{0};
  std::atomic<int> state{0};
};

// A JSON string body: quotes, backslashes and control characters escaped.
// Writes at most cap - 1 bytes and a terminating NUL.
void JsonEscape(const char* in, char* out, size_t cap) {
  size_t n = 0;
  for (; *in && n + 7 < cap; ++in) {
    const unsigned char c = static_cast<unsigned char>(*in);
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = static_cast<char>(c);
    } else if (c < 0x20) {
      n += static_cast<size_t>(std::snprintf(out + n, cap - n, "\\u%04x", c));
    } else {
      out[n++] = static_cast<char>(c);
    }
  }
  out[n] = '\0';
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

struct FlightRecorder::Impl {
  std::string dir, host;
  int64_t rank = 0;
  int64_t capacity = 0;
  std::unique_ptr<Slot[]> slots;
  std::atomic<int64_t> next{0};
  std::string groups_json;  // "{"dp": [0, 1], ...}"
  std::mutex dump_mu;

  // The whole file to fd; signal-safe enough for a dying process (snprintf
  // into stack buffers, write(2)); no allocation.
  bool WriteTo(int fd, const char* reason) const {
    char head[2048], esc_reason[1024], esc_host[256];
    JsonEscape(reason, esc_reason, sizeof esc_reason);
    JsonEscape(host.c_str(), esc_host, sizeof esc_host);
    int n = std::snprintf(head, sizeof head,
                          "{\"rank\": %lld, \"host\": \"%s\", \"reason\": \"%s\", \"time_unix_ns\": %lld, "
                          "\"capacity\": %lld, \"groups\": ",
                          static_cast<long long>(rank), esc_host, esc_reason, static_cast<long long>(NowUnixNs()),
                          static_cast<long long>(capacity));
    if (!WriteAll(fd, head, static_cast<size_t>(n)) || !WriteAll(fd, groups_json.data(), groups_json.size()) ||
        !WriteAll(fd, ", \"records\": [", 14)) {
      return false;
    }
    const int64_t end = next.load(std::memory_order_acquire);
    bool first = true;
    for (int64_t id = std::max<int64_t>(0, end - capacity); id < end; ++id) {
      const Slot& s = slots[static_cast<size_t>(id % capacity)];
      if (s.id.load(std::memory_order_acquire) != id) continue;  // being rewritten
      const int state = s.state.load();
      char group[80], line[768];
      JsonEscape(s.group, group, sizeof group);
      n = std::snprintf(
          line, sizeof line,
          "%s\n  {\"id\": %lld, \"group\": \"%s\", \"seq\": %lld, \"op\": \"%s\", \"dtype\": \"%s\", "
          "\"bytes\": %lld, \"peer\": %d, \"step\": %lld, \"group_rank\": %d, \"group_size\": %d, "
          "\"state\": \"%s\", \"issued_ns\": %lld, \"started_ns\": %lld, \"ended_ns\": %lld}",
          first ? "" : ",", static_cast<long long>(id), group, static_cast<long long>(s.seq),
          CommOpName(static_cast<CommOp>(s.op)), CommDTypeName(static_cast<CommDType>(s.dtype)),
          static_cast<long long>(s.bytes), s.peer, static_cast<long long>(s.step), s.group_rank, s.group_size,
          state == kDone ? "done" : state == kFailed ? "failed" : "in flight",
          static_cast<long long>(s.issued_ns.load()), static_cast<long long>(s.started_ns.load()),
          static_cast<long long>(s.ended_ns.load()));
      if (!WriteAll(fd, line, static_cast<size_t>(n))) return false;
      first = false;
    }
    return WriteAll(fd, "\n]}\n", 4);
  }

  std::string Path() const { return dir + "/rank-" + std::to_string(rank) + ".json"; }
};

namespace {

std::atomic<FlightRecorder::Impl*> g_impl{nullptr};

// Fatal signals: write the ring (best effort), then die of the signal.
void OnFatalSignal(int sig) {
  FlightRecorder::Impl* impl = g_impl.load();
  if (impl != nullptr) {
    char path[1024], tmp[1040], reason[64];
    std::snprintf(path, sizeof path, "%s/rank-%lld.json", impl->dir.c_str(), static_cast<long long>(impl->rank));
    std::snprintf(tmp, sizeof tmp, "%s.tmp", path);
    std::snprintf(reason, sizeof reason, "fatal signal %d (%s)", sig, strsignal(sig));
    ::mkdir(impl->dir.c_str(), 0755);
    const int fd = ::open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const bool ok = impl->WriteTo(fd, reason);
      ::close(fd);
      if (ok) ::rename(tmp, path);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void InstallFatalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace

FlightRecorder& FlightRecorder::Get() {
  static FlightRecorder recorder;
  return recorder;
}

void FlightRecorder::Enable(const std::string& dir, int64_t world_rank, const std::string& host,
                            int64_t capacity, const std::vector<std::pair<std::string, std::vector<int64_t>>>& groups) {
  if (capacity <= 0) return;
  std::string g = "{";
  for (size_t i = 0; i < groups.size(); ++i) {
    g += (i ? ", \"" : "\"") + groups[i].first + "\": [";
    for (size_t j = 0; j < groups[i].second.size(); ++j) {
      g += (j ? ", " : "") + std::to_string(groups[i].second[j]);
    }
    g += "]";
  }
  g += "}";
  if (Impl* running = g_impl.load(); running != nullptr) {
    // A later run in the same process (tests): its directory and groups; the
    // ring and its capacity stay.
    std::lock_guard<std::mutex> lock(running->dump_mu);
    running->dir = dir, running->host = host, running->rank = world_rank, running->groups_json = g;
    return;
  }
  auto* impl = new Impl;  // lives as long as the process: the signal handler may read it
  impl->dir = dir;
  impl->host = host;
  impl->rank = world_rank;
  impl->capacity = capacity;
  impl->slots.reset(new Slot[static_cast<size_t>(capacity)]);
  impl->groups_json = g;
  g_impl.store(impl);
  InstallFatalHandlers();
}

bool FlightRecorder::enabled() const { return g_impl.load(std::memory_order_acquire) != nullptr; }

int64_t FlightRecorder::Record(const std::string& group, int64_t seq, const Communicator::OpDesc& op,
                               int64_t bytes, int64_t step, int group_rank, int group_size) {
  Impl* impl = g_impl.load(std::memory_order_acquire);
  if (impl == nullptr) return -1;
  const int64_t id = impl->next.fetch_add(1, std::memory_order_acq_rel);
  Slot& s = impl->slots[static_cast<size_t>(id % impl->capacity)];
  s.id.store(-1, std::memory_order_release);
  std::snprintf(s.group, sizeof s.group, "%s", group.c_str());
  s.seq = seq, s.bytes = bytes, s.step = step;
  s.op = static_cast<int>(op.op), s.dtype = static_cast<int>(op.dtype), s.peer = op.peer;
  s.group_rank = group_rank, s.group_size = group_size;
  s.issued_ns.store(NowUnixNs());
  s.started_ns.store(0);
  s.ended_ns.store(0);
  s.state.store(kInFlight);
  s.id.store(id, std::memory_order_release);
  return id;
}

void FlightRecorder::MarkStarted(int64_t id) {
  Impl* impl = g_impl.load(std::memory_order_acquire);
  if (impl == nullptr || id < 0) return;
  Slot& s = impl->slots[static_cast<size_t>(id % impl->capacity)];
  if (s.id.load(std::memory_order_acquire) == id) s.started_ns.store(NowUnixNs());
}

void FlightRecorder::MarkEnded(int64_t id, bool ok) {
  Impl* impl = g_impl.load(std::memory_order_acquire);
  if (impl == nullptr || id < 0) return;
  Slot& s = impl->slots[static_cast<size_t>(id % impl->capacity)];
  if (s.id.load(std::memory_order_acquire) != id) return;
  s.ended_ns.store(NowUnixNs());
  s.state.store(ok ? kDone : kFailed);
}

int64_t FlightRecorder::world_rank() const {
  const Impl* impl = g_impl.load(std::memory_order_acquire);
  return impl == nullptr ? 0 : impl->rank;
}

std::string FlightRecorder::OldestInFlight() const {
  const Impl* impl = g_impl.load(std::memory_order_acquire);
  if (impl == nullptr) return "";
  const int64_t end = impl->next.load(std::memory_order_acquire);
  for (int64_t id = std::max<int64_t>(0, end - impl->capacity); id < end; ++id) {
    const Slot& s = impl->slots[static_cast<size_t>(id % impl->capacity)];
    if (s.id.load(std::memory_order_acquire) != id || s.state.load() != kInFlight) continue;
    char line[256];
    std::snprintf(line, sizeof line, "%s of %lld bytes on group '%s' at step %lld, in flight for %.1f s",
                  CommOpName(static_cast<CommOp>(s.op)), static_cast<long long>(s.bytes), s.group,
                  static_cast<long long>(s.step), static_cast<double>(NowUnixNs() - s.issued_ns.load()) * 1e-9);
    return line;
  }
  return "";
}

Result<std::string> FlightRecorder::Dump(const std::string& reason) {
  Impl* impl = g_impl.load(std::memory_order_acquire);
  if (impl == nullptr) return FailedPrecondition("the flight recorder is off (telemetry.flight_records = 0)");
  std::lock_guard<std::mutex> lock(impl->dump_mu);
  ::mkdir(impl->dir.c_str(), 0755);
  const std::string path = impl->Path(), tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return IoError("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = impl->WriteTo(fd, reason.c_str());
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot write " + path + " (disk full?)");
  }
  return path;
}

}  // namespace scaletrain
