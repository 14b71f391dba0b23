#include "train/launch_checks.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/sha256.h"
#include "core/version.h"

namespace scaletrain {

namespace {

// What each rank tells the others at start-up: its build, its config (a
// hash per line of config.resolved.toml, so that the first differing key can
// be named) and its host.
struct RankIdentity {
  static constexpr int64_t kText = 64, kLines = 256;
  char version[kText] = {}, host[kText] = {};
  uint64_t line_hash[kLines] = {};
  char line[kLines][kText] = {};  // the line's start, for the message
};

RankIdentity IdentityOf(const RunConfig& cfg) {
  RankIdentity id;
  std::snprintf(id.version, sizeof id.version, "%s", ScaletrainVersion());
  gethostname(id.host, sizeof id.host - 1);
  std::istringstream toml(RunConfigToToml(cfg));
  std::string text, section;
  for (int64_t i = 0; i < RankIdentity::kLines && std::getline(toml, text);) {
    if (!text.empty() && text[0] == '[') section = text;
    if (text.empty() || text[0] == '[' || text[0] == '#') continue;
    const std::string key = section + " " + text;
    const std::string hex = Sha256Hex(key.data(), key.size());
    id.line_hash[i] = std::stoull(hex.substr(0, 16), nullptr, 16);
    std::snprintf(id.line[i], RankIdentity::kText, "%s", (section.substr(1, section.size() - 2) + "." + text).c_str());
    ++i;
  }
  return id;
}

}  // namespace

Status CheckRanksAgree(Communicator& world, const RunConfig& cfg, std::vector<std::string>* hosts) {
  const RankIdentity mine = IdentityOf(cfg);
  std::vector<RankIdentity> all(static_cast<size_t>(world.size()));
  ST_RETURN_IF_ERROR(world.Allgather(reinterpret_cast<const uint8_t*>(&mine), reinterpret_cast<uint8_t*>(all.data()),
                                     static_cast<int64_t>(sizeof(RankIdentity))));
  for (const RankIdentity& o : all) hosts->emplace_back(o.host);
  const RankIdentity& lead = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    const RankIdentity& o = all[r];
    const std::string who = "rank " + std::to_string(r) + " (host " + o.host + ")";
    if (std::strcmp(o.version, lead.version) != 0) {
      return FailedPrecondition(who + " runs scaletrain " + o.version + ", rank 0 (host " + lead.host +
                                ") runs " + lead.version + "; install the same build on every host");
    }
    for (int64_t i = 0; i < RankIdentity::kLines; ++i) {
      if (o.line_hash[i] == lead.line_hash[i]) continue;
      return FailedPrecondition(who + " has a different config than rank 0 (host " + lead.host + "): '" +
                                o.line[i] + "' against '" + lead.line[i] +
                                "'; launch every rank with the same config file and --set flags");
    }
  }
  return Status::Ok();
}

// Ranks are numbered tp fastest (parallel/mesh.h), so a launcher that fills
// each host's slots in order keeps a TP group on one host when the ranks per
// host are a multiple of parallel.tp.
void WarnIfTensorParallelSpansHosts(const Mesh& mesh, const std::vector<std::string>& hosts) {
  if (mesh.tp_size() < 2) return;
  for (const std::vector<int64_t>& group : mesh.AllGroups(MeshAxis::kTp)) {
    for (int64_t r : group) {
      if (hosts[static_cast<size_t>(r)] == hosts[static_cast<size_t>(group.front())]) continue;
      std::printf("warning: the tensor-parallel group of ranks %lld..%lld spans hosts %s and %s; TP across hosts "
                  "is slow: launch a multiple of parallel.tp = %lld ranks per host, filled in order "
                  "(mpirun --map-by slot)\n",
                  static_cast<long long>(group.front()), static_cast<long long>(group.back()),
                  hosts[static_cast<size_t>(group.front())].c_str(), hosts[static_cast<size_t>(r)].c_str(),
                  static_cast<long long>(mesh.tp_size()));
      return;
    }
  }
}

}  // namespace scaletrain
