// A hardware catalog file (plan::HardwareCatalog::LoadFile): [gpu.X],
// [node.X], [fabric.X], [cluster.X] and [calibration.X] tables, as in
// configs/hardware/, a user's own file or a GPU calibration.
//
// Checked besides not crashing: a refusal has a message; in an accepted
// catalog every GPU meets the limits LoadFile states (efficiencies in
// (0, 1], a positive matrix rate and HBM bandwidth, an `assumed` list of
// the factors the range varies only), and every cluster either resolves to
// its GPU, node and fabric or is refused with a message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_scratch.h"
#include "plan/hardware.h"

namespace fuzz = scaletrain::fuzz;
using scaletrain::plan::HardwareCatalog;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::WriteScratchFile("hardware.toml", data, size);
  HardwareCatalog catalog;
  const scaletrain::Status st = catalog.LoadFile(path);
  if (!st.ok()) {
    fuzz::CheckRefusal(st, "HardwareCatalog::LoadFile");
    return 0;
  }
  for (const std::string& name : catalog.GpuNames()) {
    auto gpu = catalog.Gpu(name);
    if (!gpu.ok()) fuzz::Fail("listed GPU '" + name + "' is not found");
    for (double e : {gpu->matmul_efficiency, gpu->hbm_efficiency, gpu->attention_efficiency,
                     gpu->sustained_clock_ratio}) {
      if (!(e > 0 && e <= 1)) fuzz::Fail("GPU '" + name + "' was accepted with an efficiency outside (0, 1]");
    }
    if (!(gpu->hbm_tbps > 0)) fuzz::Fail("GPU '" + name + "' was accepted without HBM bandwidth");
    // A [calibration.X]'s shares: 0 (not measured) or in (0, 1]; its issue time >= 0.
    for (double e : {gpu->fp16_matmul_efficiency, gpu->tf32_matmul_efficiency, gpu->fp32_matmul_efficiency,
                     gpu->fp8_matmul_efficiency}) {
      if (!(e >= 0 && e <= 1)) fuzz::Fail("GPU '" + name + "' was accepted with a precision's share outside [0, 1]");
    }
    if (!(gpu->kernel_issue_us >= 0)) fuzz::Fail("GPU '" + name + "' was accepted with a negative kernel_issue_us");
    for (const std::string& a : gpu->assumed) {
      if (a != "matmul_efficiency" && a != "attention_efficiency" && a != "hbm_efficiency" &&
          a != "sustained_clock_ratio") {
        fuzz::Fail("GPU '" + name + "' was accepted with '" + a + "' in its assumed list");
      }
    }
    auto cluster = catalog.ClusterForGpu(name);
    if (!cluster.ok()) fuzz::CheckRefusal(cluster.status(), "HardwareCatalog::ClusterForGpu");
  }
  for (const std::string& name : catalog.ClusterNames()) {
    auto cluster = catalog.Cluster(name);
    if (!cluster.ok()) {
      fuzz::CheckRefusal(cluster.status(), "HardwareCatalog::Cluster");
      continue;
    }
    if (cluster->node.gpus_per_node <= 0) {
      fuzz::Fail("cluster '" + name + "' resolved to a node without GPUs");
    }
  }
  return 0;
}
