#include "telemetry/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tensorboard_event.pb.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

// The byte-at-a-time table of the reflected CRC-32C polynomial.
std::array<uint32_t, 256> Crc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

double WallTimeSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void PutLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = Crc32cTable();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(const std::string& payload) {
  std::string out, length;
  PutLittleEndian(length, payload.size(), 8);
  out += length;
  PutLittleEndian(out, MaskedCrc32c(length.data(), length.size()), 4);
  out += payload;
  PutLittleEndian(out, MaskedCrc32c(payload.data(), payload.size()), 4);
  return out;
}

std::vector<std::pair<std::string, double>> StepScalars(const StepRecord& r) {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", r.loss},
      {"train/lr", r.lr},
      {"train/grad_norm", r.grad_norm},
      {"perf/step_time_s", r.step_time_s},
      {"perf/tokens_per_s", r.tokens_per_s},
      {"time/data_s", r.data_s},
      {"time/forward_s", r.forward_s},
      {"time/backward_s", r.backward_s},
      {"time/grad_sync_wait_s", r.grad_sync_wait_s},
      {"time/exposed_comm_s", r.exposed_comm_s},
      {"time/optimizer_s", r.optimizer_s},
  };
  if (r.tp_comm_wait_s) s.emplace_back("time/tp_comm_wait_s", *r.tp_comm_wait_s);
  if (r.cp_comm_wait_s) s.emplace_back("time/cp_comm_wait_s", *r.cp_comm_wait_s);
  if (r.pipeline_wait_s) s.emplace_back("time/pipeline_wait_s", *r.pipeline_wait_s);
  if (r.val_loss) s.emplace_back("val/loss", *r.val_loss);
  for (int g = 0; g < kNumCommGroups; ++g) {
    if (!r.groups_used[g]) continue;
    const std::string group = CommGroupName(static_cast<CommGroup>(g));
    s.emplace_back("comm/" + group + "_bytes", static_cast<double>(r.traffic[g].payload_bytes));
  }
  return s;
}

Result<TensorBoardWriter> TensorBoardWriter::Open(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "tb";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return IoError("cannot create TensorBoard's folder '" + dir.string() + "': " + ec.message() +
                   "; free it, or set telemetry.tensorboard = false to run without it");
  }
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  // Distinct per start (a resumed run adds a file): seconds, and the process.
  const std::string name = "events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(WallTimeSeconds())) + "." + host +
                           "." + std::to_string(::getpid());
  const std::string path = (dir / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return IoError("cannot create TensorBoard event file '" + path + "': " + std::strerror(errno) +
                   "; set telemetry.tensorboard = false to run without it");
  }
  TensorBoardWriter writer(f, path);
  tensorboard::Event first;
  first.set_wall_time(WallTimeSeconds());
  first.set_file_version("brain.Event:2");
  ST_RETURN_IF_ERROR(writer.WriteRecord(first.SerializeAsString()));
  return writer;
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

Status TensorBoardWriter::WriteRecord(const std::string& payload) {
  const std::string record = TfRecord(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return IoError("cannot write TensorBoard event file '" + path_ + "' (disk full?)");
  }
  return Status::Ok();
}

Status TensorBoardWriter::AddScalars(int64_t step,
                                     const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::SummaryValue* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteRecord(event.SerializeAsString());
}

}  // namespace scaletrain
