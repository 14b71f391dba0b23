#include "plan/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>

#include "core/strings.h"
#include "plan/gpu_calibration.h"
#include "plan/toml_util.h"

namespace scaletrain::plan {

namespace fs = std::filesystem;

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBF16:
      return "bf16";
    case Precision::kFP16:
      return "fp16";
    case Precision::kFP8:
      return "fp8";
    case Precision::kTF32:
      return "tf32";
    case Precision::kFP32:
      return "fp32";
  }
  return "?";
}

Result<Precision> PrecisionFromName(const std::string& name) {
  for (Precision p :
       {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kTF32, Precision::kFP32}) {
    if (name == PrecisionName(p)) return p;
  }
  return InvalidArgument("unknown precision '" + name + "'; use bf16, fp16, fp8, tf32 or fp32");
}

double GpuSpec::PeakTflops(Precision p) const {
  switch (p) {
    case Precision::kBF16:
      return bf16_tflops;
    case Precision::kFP16:
      return fp16_tflops;
    case Precision::kFP8:
      return fp8_tflops;
    case Precision::kTF32:
      return tf32_tflops;
    case Precision::kFP32:
      return fp32_tflops;
  }
  return 0;
}

double GpuSpec::MatmulEfficiency(Precision p) const {
  const double own = p == Precision::kFP16   ? fp16_matmul_efficiency
                     : p == Precision::kTF32 ? tf32_matmul_efficiency
                     : p == Precision::kFP32 ? fp32_matmul_efficiency
                                             : 0.0;
  return own > 0 ? own : matmul_efficiency;
}

namespace {

template <typename Map>
std::vector<std::string> Keys(const Map& m) {
  std::vector<std::string> k;
  for (const auto& [name, v] : m) k.push_back(name);
  return k;
}

}  // namespace

std::string UnknownNameMessage(const std::string& what, const std::string& name,
                               const std::vector<std::string>& known) {
  const std::string hint = DidYouMean(name, known);
  std::string msg = "unknown " + what + " '" + name + "'" + (hint.empty() ? ";" : hint);
  msg += " known: ";
  for (size_t i = 0; i < known.size(); ++i) msg += (i ? ", " : "") + known[i];
  return msg;
}

namespace {

// A profile's measured GEMMs ([m, n, k, forward TFLOP/s, backward TFLOP/s])
// and attention times ([batch, seq, hidden, heads, forward s, backward s]).
Status AddMeasurements(const std::vector<std::vector<double>>& gemms,
                       const std::vector<std::vector<double>>& attention, const std::string& where,
                       GpuSpec* g) {
  // A count the rows store as int64: at least 1 and below 2^63 (casting NaN
  // or a larger value is undefined behaviour).
  const auto count = [](double v) { return v >= 1 && v < 9223372036854775808.0; };
  for (const auto& row : gemms) {
    if (!count(row[0]) || !count(row[1]) || !count(row[2]) || !(row[3] > 0) || !(row[4] > 0)) {
      return InvalidArgument(
          where +
          ": measured_gemms rows are [m, n, k, forward TFLOP/s, backward TFLOP/s] "
          "with every entry positive (m, n, k below 2^63); re-run `scaletrain bench`");
    }
    g->measured_gemms.push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                                 static_cast<int64_t>(row[2]), row[3], row[4]});
  }
  for (const auto& row : attention) {
    if (!count(row[0]) || !count(row[1]) || !count(row[2]) || !count(row[3]) || !(row[4] > 0) ||
        !(row[5] > 0)) {
      return InvalidArgument(where +
                             ": measured_attention rows are [batch, seq, hidden, heads, forward s, "
                             "backward s] with every entry positive (counts below 2^63); re-run "
                             "`scaletrain bench`");
    }
    g->measured_attention.push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                                     static_cast<int64_t>(row[2]), static_cast<int64_t>(row[3]),
                                     row[4], row[5]});
  }
  return Status::Ok();
}

// The ranges the cost model's numbers must be in (it divides by them or
// scales with them), checked where each is read.
constexpr Bounds kShareOfPeak{0, 1, true, false, "a fraction: an achieved share of the peak"};
constexpr Bounds kPositive{0, std::numeric_limits<double>::infinity(), true, false, "a positive rate"};

// What no single key says: at least one matrix rate.
Status CheckGpuRates(const GpuSpec& g, const std::string& where) {
  if (!(g.bf16_tflops > 0 || g.fp16_tflops > 0 || g.fp8_tflops > 0 || g.tf32_tflops > 0 ||
        g.fp32_tflops > 0)) {
    return InvalidArgument(where +
                           ": no positive matrix rate (bf16_tflops, fp16_tflops, fp8_tflops, "
                           "tf32_tflops or fp32_tflops); give at least one");
  }
  return Status::Ok();
}

// A profile's measured model steps ([batch, seq, hidden, heads, layers,
// vocab, forward s, backward s]).
Status AddModelSteps(const std::vector<std::vector<double>>& steps, const std::string& where, GpuSpec* g) {
  for (const auto& row : steps) {
    bool ok = row[6] > 0 && row[7] > 0;
    for (int i = 0; i < 6; ++i) ok = ok && row[i] >= 1 && row[i] < 9.2e18;
    if (!ok) {
      return InvalidArgument(where +
                             ": measured_model_step rows are [batch, seq, hidden, heads, layers, vocab, "
                             "forward s, backward s] with every entry positive; re-run `scaletrain bench`");
    }
    g->measured_model_step.push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                                      static_cast<int64_t>(row[2]), static_cast<int64_t>(row[3]),
                                      static_cast<int64_t>(row[4]), static_cast<int64_t>(row[5]), row[6],
                                      row[7]});
  }
  return Status::Ok();
}

// An `assumed` list names only the figures of its table the prediction's
// range treats as uncertain inputs; anything else is a typo or a figure the
// range does not use, and the error lists the valid ones.
Status CheckAssumed(const std::vector<std::string>& assumed,
                    std::initializer_list<const char*> valid, const std::string& where) {
  for (const std::string& a : assumed) {
    if (std::any_of(valid.begin(), valid.end(), [&](const char* v) { return a == v; })) continue;
    std::string names;
    for (const char* v : valid) names += std::string(names.empty() ? "" : ", ") + v;
    return InvalidArgument(
        where + ": assumed lists '" + a +
        "', which is no figure the prediction's range varies; the figures an entry "
        "may mark assumed: " +
        names);
  }
  return Status::Ok();
}

Result<GpuSpec> GpuFromTable(const std::string& name, const toml::table& t, const std::string& path,
                             const std::string& context) {
  GpuSpec g;
  g.name = name;
  TableReader r(path, context);
  r.Add("description", &g.description);
  r.Add("bf16_tflops", &g.bf16_tflops, true);
  r.Add("fp16_tflops", &g.fp16_tflops);
  r.Add("fp8_tflops", &g.fp8_tflops);
  r.Add("tf32_tflops", &g.tf32_tflops);
  r.Add("fp32_tflops", &g.fp32_tflops);
  r.Add("hbm_gib", &g.hbm_gib, true);
  r.Add("hbm_tbps", &g.hbm_tbps, kPositive, true);
  r.Add("tdp_w", &g.tdp_w, true);
  r.Add("matmul_efficiency", &g.matmul_efficiency, kShareOfPeak);
  r.Add("hbm_efficiency", &g.hbm_efficiency, kShareOfPeak);
  r.Add("attention_efficiency", &g.attention_efficiency, kShareOfPeak);
  r.Add("sustained_clock_ratio", &g.sustained_clock_ratio, kShareOfPeak);
  r.Add("speed_spread", &g.speed_spread, {0, 0.2, false, true, "a relative standard deviation, e.g. 0.01"});
  r.Add("gemm_k_overhead", &g.gemm_k_overhead,
        {0, 4096, false, false, "a GEMM's fixed work per output tile, in units of its depth k; 0 if not measured"});
  r.Add("fp8_matmul_efficiency", &g.fp8_matmul_efficiency,
        {0, 1, false, false, "an achieved share of the FP8 peak; 0: as matmul_efficiency"});
  r.Add("idle_w", &g.idle_w);
  r.Add("sm_count", &g.sm_count, {0, std::numeric_limits<double>::infinity(), false, false, "a count"});
  r.Add("reference_cluster", &g.reference_cluster);
  r.Add("assumed", &g.assumed);
  std::vector<std::vector<double>> gemms, attention, steps;
  r.Add("measured_gemms", &gemms, 5);
  r.Add("measured_attention", &attention, 6);
  r.Add("measured_model_step", &steps, 8);
  ST_RETURN_IF_ERROR(r.Read(t));
  const std::string where = path + ": " + context;
  ST_RETURN_IF_ERROR(AddMeasurements(gemms, attention, where, &g));
  ST_RETURN_IF_ERROR(AddModelSteps(steps, where, &g));
  ST_RETURN_IF_ERROR(CheckGpuRates(g, where));
  ST_RETURN_IF_ERROR(CheckAssumed(
      g.assumed,
      {"matmul_efficiency", "attention_efficiency", "hbm_efficiency", "sustained_clock_ratio"},
      where));
  return g;
}

Result<NodeSpec> NodeFromTable(const std::string& name, const toml::table& t, const std::string& path,
                               const std::string& context) {
  NodeSpec n;
  n.name = name;
  TableReader r(path, context);
  r.Add("gpus_per_node", &n.gpus_per_node, true);
  r.Add("intra_kind", &n.intra_kind);
  r.Add("intra_gbps", &n.intra_gbps, true);
  r.Add("intra_efficiency", &n.intra_efficiency);
  r.Add("intra_latency_us", &n.intra_latency_us);
  r.Add("max_power_kw", &n.max_power_kw, true);
  r.Add("overhead_w", &n.overhead_w);
  r.Add("assumed", &n.assumed);
  ST_RETURN_IF_ERROR(r.Read(t));
  if (n.gpus_per_node <= 0 || n.intra_gbps <= 0) {
    return InvalidArgument(path + ": " + context + ": gpus_per_node and intra_gbps must be positive");
  }
  ST_RETURN_IF_ERROR(CheckAssumed(n.assumed, {"intra_efficiency"}, path + ": " + context));
  return n;
}

Result<FabricSpec> FabricFromTable(const std::string& name, const toml::table& t, const std::string& path,
                                   const std::string& context) {
  FabricSpec f;
  f.name = name;
  TableReader r(path, context);
  r.Add("kind", &f.kind);
  r.Add("nics_per_node", &f.nics_per_node, true);
  r.Add("nic_gbit", &f.nic_gbit, true);
  r.Add("efficiency", &f.efficiency);
  r.Add("latency_us", &f.latency_us);
  r.Add("p2p_gbit", &f.p2p_gbit);
  r.Add("assumed", &f.assumed);
  ST_RETURN_IF_ERROR(r.Read(t));
  if (f.nics_per_node <= 0 || f.nic_gbit <= 0) {
    return InvalidArgument(path + ": " + context + ": nics_per_node and nic_gbit must be positive");
  }
  ST_RETURN_IF_ERROR(CheckAssumed(f.assumed, {"efficiency"}, path + ": " + context));
  return f;
}

}  // namespace

Status HardwareCatalog::LoadFile(const std::string& path) {
  ST_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path));
  for (const auto& [k, v] : root) {
    const std::string section(k.str());
    const toml::table* entries = v.as_table();
    if (entries == nullptr || (section != "gpu" && section != "node" && section != "fabric" &&
                               section != "cluster" && section != "calibration")) {
      return InvalidArgument(path + ": unknown section '" + section +
                             "'; a hardware file holds [gpu.NAME], [node.NAME], [fabric.NAME], "
                             "[cluster.NAME] and [calibration.GPU] tables");
    }
    for (const auto& [ek, ev] : *entries) {
      const std::string name(ek.str());
      const toml::table* t = ev.as_table();
      const std::string context = "[" + section + "." + name + "]";
      if (t == nullptr) return InvalidArgument(path + ": " + context + " must be a table");
      if (section == "gpu") {
        ST_ASSIGN_OR_RETURN(gpus_[name], GpuFromTable(name, *t, path, context));
      } else if (section == "calibration") {
        continue;  // below, once the file's own [gpu.X] tables are in
      } else if (section == "node") {
        ST_ASSIGN_OR_RETURN(nodes_[name], NodeFromTable(name, *t, path, context));
      } else if (section == "fabric") {
        ST_ASSIGN_OR_RETURN(fabrics_[name], FabricFromTable(name, *t, path, context));
      } else {
        ClusterRef c;
        TableReader r(path, context);
        r.Add("gpu", &c.gpu, true);
        r.Add("node", &c.node, true);
        r.Add("fabric", &c.fabric, true);
        r.Add("usd_per_gpu_hour", &c.usd_per_gpu_hour);
        r.Add("pue", &c.pue);
        r.Add("gpu_power_cap_w", &c.variant.power_cap_w);
        r.Add("gpu_hbm_tbps", &c.variant.hbm_tbps);
        r.Add("gpu_hbm_gib", &c.variant.hbm_gib);
        r.Add("storage_write_gbps", &c.storage_write_gbps, kPositive);
        r.Add("storage_read_gbps", &c.storage_read_gbps, kPositive);
        r.Add("mtbf_hours", &c.mtbf_hours, kPositive);
        r.AddChoice("mtbf_per", &c.mtbf_per, {"node", "gpu"});
        r.Add("relaunch_s", &c.relaunch_s, kPositive);
        ST_RETURN_IF_ERROR(r.Read(*t));
        clusters_[name] = c;
      }
    }
  }
  if (const toml::table* cals = root["calibration"].as_table()) {
    for (const auto& [ek, ev] : *cals) {
      const std::string name(ek.str()), context = "[calibration." + name + "]";
      ST_ASSIGN_OR_RETURN(const GpuCalibration cal, CalibrationFromTable(name, *ev.as_table(), path, context));
      ST_RETURN_IF_ERROR(AddCalibration(cal));
    }
  }
  return Status::Ok();
}

Status HardwareCatalog::AddCalibration(const GpuCalibration& cal) {
  const std::string where = cal.source + ": [calibration." + cal.gpu + "]";
  auto it = gpus_.find(cal.gpu);
  if (it == gpus_.end()) {
    return NotFound(where + ": " + UnknownNameMessage("GPU", cal.gpu, GpuNames()) +
                    "; name the catalog entry the GPU was measured as (bench/gpu_calibrate.sh --gpu "
                    "NAME), or load the file that defines it first");
  }
  // The catalog's reading of the device's own name, where it reads one.
  std::string device_part;
  if (auto part = Gpu(cal.device); part.ok()) device_part = part->name;
  auto applied = ApplyCalibration(it->second, cal, device_part);
  if (!applied.ok()) return applied.status().WithContext(where);
  it->second = *applied;
  calibrated_[cal.gpu] = cal.source + " (measured on '" + cal.device + "')";
  return Status::Ok();
}

Status HardwareCatalog::CheckCalibrationApplies(const ClusterSpec& c) const {
  if (calibrated_.empty() || calibrated_.count(c.gpu.name) != 0) return Status::Ok();
  std::string loaded, clusters;
  for (const auto& [gpu, what] : calibrated_) {
    loaded += (loaded.empty() ? "" : "; ") + what + " calibrates " + gpu;
    for (const auto& [name, ref] : clusters_) {
      if (ref.gpu == gpu) clusters += (clusters.empty() ? "" : ", ") + name;
    }
  }
  return InvalidArgument(loaded + ", but cluster " + c.name + " runs " + c.gpu.name +
                         ", so the calibration would change nothing; plan a cluster of the calibrated "
                         "GPU" + (clusters.empty() ? "" : " (" + clusters + ")") +
                         ", or calibrate a " + c.gpu.name + " with bench/gpu_calibrate.sh");
}

Status HardwareCatalog::LoadDir(const std::string& dir) {
  ST_ASSIGN_OR_RETURN(const std::vector<std::string> files, TomlFilesIn(dir, "hardware catalog"));
  for (const auto& f : files) ST_RETURN_IF_ERROR(LoadFile(f));
  return Status::Ok();
}

namespace {

// Names published runs give GPUs by, for the catalog's own ("A100 80GB",
// "H100_SXM5", "NVIDIA A100-SXM4-40GB", "A100 (40GB)", "H100 80GB HBM3"): the
// words of the name, the vendor's and memory type's dropped, read as a part
// (a100, h100, ...), its memory in GB and its form (sxm, pcie, nvl). A part
// the catalog holds in one form takes that one; a form it lacks (or an A100
// size other than 40 / 80 GB) gives a name it does not hold, so the error
// lists the known ones.
struct GpuWords {
  std::string part, form, memory;  // "a100", "sxm" / "pcie" / "nvl", "40"
  bool other = false;              // a word that is none of these
};

GpuWords ReadGpuWords(const std::string& given) {
  static const std::set<std::string> dropped = {"nvidia", "amd",  "instinct", "tesla", "gpu",  "gb",
                                                "gib",    "hbm2", "hbm2e",    "hbm3",  "hbm3e"};
  GpuWords g;
  for (const std::string& w : LowerWords(given)) {
    if (dropped.count(w)) continue;
    const size_t digits = w.find_first_not_of("0123456789");
    const std::string unit = digits == std::string::npos ? "" : w.substr(digits);
    if (digits > 0 && (unit.empty() || unit == "gb" || unit == "g")) {
      g.memory = w.substr(0, digits);  // "80gb", "80g", "80"
    } else if (w.rfind("sxm", 0) == 0 || w == "pcie" || w == "nvl") {
      g.form = w.rfind("sxm", 0) == 0 ? "sxm" : w;
    } else if (g.part.empty()) {
      g.part = w == "mi300" ? "mi300x" : w;
    } else {
      g.other = true;
    }
  }
  return g;
}

// The parts catalogued in more than one size of their SXM form (A100 80 / 40
// GB, V100 32 / 16 GB; a plain name is the first) and, the A100, as a PCIe
// card (a100-pcie, 80 GB, and a100-pcie-40g): the name of the size and form
// the words give, which the catalog may not hold (another size or form).
std::string SizedPartName(const GpuWords& g) {
  const bool sxm = g.form.empty() || g.form == "sxm";
  const std::string usual = g.part == "a100" ? "80" : "32";
  const std::string memory = g.memory.empty() ? usual : g.memory;
  if (sxm) return g.part + "-" + memory + "g";
  const std::string card = g.part + "-" + g.form;
  return memory == usual ? card : card + "-" + memory + "g";
}

std::string CatalogGpuName(const std::string& given) {
  const GpuWords g = ReadGpuWords(given);
  if (g.other || g.part.empty())
    return NameKey(given);  // not a part, form and size: the name as given
  const bool sxm = g.form.empty() || g.form == "sxm";
  if (g.part == "a100" || g.part == "v100") return SizedPartName(g);
  // Other parts are catalogued in one size: another size is a variant of
  // it (StatedMemoryGib).
  if (g.part == "h100") return "h100-" + (g.form.empty() ? std::string("sxm") : g.form);
  return sxm ? g.part : g.part + "-" + g.form;  // h200-nvl, ...: not in the catalog
}

}  // namespace

double StatedMemoryGib(const std::string& gpu_name, const GpuSpec& part) {
  const GpuWords g = ReadGpuWords(gpu_name);
  if (g.memory.empty() || g.other) return 0;
  // Labels round either way ("80GB" H100: 79.6 GiB; "141GB" H200: 131 GiB).
  const double gb = std::stod(g.memory), per_gib = 1024.0 * 1024.0 * 1024.0 / 1e9;
  auto near = [&](double label) { return std::abs(gb - label) <= 0.05 * label; };
  if (near(part.hbm_gib) || near(part.hbm_gib * per_gib)) return 0;
  return gb / per_gib;
}

Result<GpuSpec> HardwareCatalog::Gpu(const std::string& name) const {
  auto it = gpus_.find(name);
  if (it == gpus_.end()) it = gpus_.find(CatalogGpuName(name));
  if (it == gpus_.end()) return NotFound(UnknownNameMessage("GPU", name, GpuNames()));
  return it->second;
}

Result<ClusterSpec> HardwareCatalog::Cluster(const std::string& name) const {
  auto it = clusters_.find(name);
  if (it == clusters_.end()) return NotFound(UnknownNameMessage("cluster", name, ClusterNames()));
  const ClusterRef& ref = it->second;
  ClusterSpec c;
  c.name = name;
  auto gpu = Gpu(ref.gpu);
  if (!gpu.ok()) return gpu.status().WithContext("cluster " + name);
  c.gpu = *gpu;
  auto n = nodes_.find(ref.node);
  if (n == nodes_.end()) {
    return NotFound("cluster " + name + ": " + UnknownNameMessage("node", ref.node, Keys(nodes_)));
  }
  auto f = fabrics_.find(ref.fabric);
  if (f == fabrics_.end()) {
    return NotFound("cluster " + name + ": " +
                    UnknownNameMessage("fabric", ref.fabric, Keys(fabrics_)));
  }
  c.node = n->second;
  c.fabric = f->second;
  c.usd_per_gpu_hour = ref.usd_per_gpu_hour;
  c.pue = ref.pue;
  c.storage_write_gbps = ref.storage_write_gbps;
  c.storage_read_gbps = ref.storage_read_gbps;
  c.mtbf_hours = ref.mtbf_hours;
  c.mtbf_per = ref.mtbf_per;
  c.relaunch_s = ref.relaunch_s;
  auto variant = GpuVariant(c.gpu, ref.variant);
  if (!variant.ok()) return variant.status().WithContext("cluster " + name);
  c.gpu = *variant;
  return c;
}

Result<GpuSpec> GpuVariant(const GpuSpec& g, const GpuVariantSpec& spec) {
  GpuSpec v = g;
  if (spec.power_cap_w != 0) {
    ST_ASSIGN_OR_RETURN(v, PowerCapped(v, spec.power_cap_w));
  }
  if (spec.hbm_gib != 0) {
    ST_ASSIGN_OR_RETURN(v, WithMemory(v, spec.hbm_gib));
  }
  if (spec.hbm_tbps != 0) {
    ST_ASSIGN_OR_RETURN(v, WithBandwidth(v, spec.hbm_tbps));
  }
  return v;
}

Result<GpuSpec> WithBandwidth(const GpuSpec& g, double hbm_tbps) {
  if (!(hbm_tbps > 0)) {
    return InvalidArgument(Fmt("a GPU memory bandwidth must be positive (TB/s), got %g", hbm_tbps));
  }
  GpuSpec c = g;
  c.hbm_tbps = hbm_tbps;
  c.description = g.description + Fmt(", %g TB/s", hbm_tbps);
  return c;
}

Result<GpuSpec> PowerCapped(const GpuSpec& g, double cap_w) {
  if (!(cap_w > 0)) return InvalidArgument(Fmt("a power cap must be positive (W), got %g", cap_w));
  if (g.tdp_w <= 0 || cap_w >= g.tdp_w) return g;
  const double idle = g.idle_w > 0 ? g.idle_w : 0.1 * g.tdp_w;
  if (cap_w <= idle) {
    return InvalidArgument(Fmt("a power cap of %g W is at or below %s's idle power (%g W); give more", cap_w,
                               g.name.c_str(), idle));
  }
  GpuSpec c = g;
  c.capped_power_share = g.capped_power_share * (cap_w - idle) / (g.tdp_w - idle);
  c.sustained_clock_ratio = g.sustained_clock_ratio * std::cbrt((cap_w - idle) / (g.tdp_w - idle));
  c.tdp_w = cap_w;
  c.description = g.description + Fmt(", capped at %g W", cap_w);
  return c;
}

Result<GpuSpec> WithMemory(const GpuSpec& g, double hbm_gib) {
  if (!(hbm_gib > 0)) return InvalidArgument(Fmt("a GPU memory size must be positive (GiB), got %g", hbm_gib));
  GpuSpec c = g;
  c.hbm_gib = hbm_gib;
  c.description = g.description + Fmt(", %g GiB", hbm_gib);
  return c;
}

Result<ClusterSpec> HardwareCatalog::ClusterForGpu(const std::string& gpu_name) const {
  ST_ASSIGN_OR_RETURN(GpuSpec g, Gpu(gpu_name));
  if (!g.reference_cluster.empty()) return Cluster(g.reference_cluster);
  for (const auto& [name, ref] : clusters_) {
    if (ref.gpu == g.name) return Cluster(name);
  }
  return NotFound(
      "GPU '" + gpu_name +
      "' has no reference_cluster and no cluster preset uses it; add one to configs/hardware");
}

bool IsAssumed(const std::vector<std::string>& assumed, const std::string& field) {
  return std::find(assumed.begin(), assumed.end(), field) != assumed.end();
}

std::vector<std::string> HardwareCatalog::GpuNames() const { return Keys(gpus_); }
std::vector<std::string> HardwareCatalog::ClusterNames() const { return Keys(clusters_); }

Result<std::string> FindConfigDir() {
  auto has_catalog = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_directory(p / "hardware", ec) && fs::is_directory(p / "models", ec);
  };
  if (const char* env = std::getenv("SCALETRAIN_CONFIG_DIR"); env != nullptr && *env != '\0') {
    if (has_catalog(env)) return std::string(env);
    return NotFound(std::string("SCALETRAIN_CONFIG_DIR=") + env +
                    " has no hardware/ and models/ folders");
  }
  if (has_catalog("configs")) return std::string("configs");
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
      if (has_catalog(dir / "configs")) return (dir / "configs").string();
      if (dir == dir.root_path()) break;
    }
  }
  return NotFound(
      "cannot find the configs/ folder (hardware and model catalogs); run from the repository "
      "root, "
      "pass --config-dir DIR, or set SCALETRAIN_CONFIG_DIR");
}

double SlowestGpuFactor(double spread, int64_t gpus) {
  if (!(spread > 0) || gpus <= 1) return 1.0;
  const double n = static_cast<double>(gpus), p = (n - 0.375) / (n + 0.25);
  // The standard normal quantile at p, by bisection on the CDF.
  double lo = 0, hi = 10;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return std::max(0.5, 1.0 - spread * 0.5 * (lo + hi));
}

GpuSpec PacedBySlowest(GpuSpec gpu, int64_t gpus) {
  gpu.sustained_clock_ratio *= SlowestGpuFactor(gpu.speed_spread, gpus);
  return gpu;
}

}  // namespace scaletrain::plan
