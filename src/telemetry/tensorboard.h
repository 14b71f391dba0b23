// TensorBoard event files: the run's scalars by step, for `tensorboard
// --logdir RUN_DIR/tb`. The file is TensorBoard's: TFRecord framing (each
// record its length, a masked CRC-32C of the length, the bytes, a masked
// CRC-32C of the bytes), holding Event protobufs (tensorboard_event.proto) of
// scalar summaries. Written incrementally and flushed after every step, so a
// live run shows.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "telemetry/metrics.h"

namespace scaletrain {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, and
// TFRecord's masked form of it: rotated right by 15 bits plus 0xa282ead8.
uint32_t Crc32c(const void* data, size_t n);
uint32_t MaskedCrc32c(const void* data, size_t n);

// One TFRecord: the framing around `payload`.
std::string TfRecord(const std::string& payload);

// The scalars of a step record under TensorBoard tags ("train/loss",
// "val/loss", "time/forward_s", ...): every number metrics.jsonl holds for the
// step that is a figure over time.
std::vector<std::pair<std::string, double>> StepScalars(const StepRecord& record);

class TensorBoardWriter {
 public:
  // A new event file events.out.tfevents.<seconds>.<host> in RUN_DIR/tb
  // (created), starting with the file-version record. A resumed run writes a
  // new file beside the earlier ones; TensorBoard reads them all.
  static Result<TensorBoardWriter> Open(const std::string& run_dir);
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  ~TensorBoardWriter();

  // Scalars at `step`, then flushed.
  Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  // StepScalars(record) at record.step.
  Status Append(const StepRecord& record) { return AddScalars(record.step, StepScalars(record)); }
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  Status WriteRecord(const std::string& payload);

  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace scaletrain
