#include "report/flight.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace scaletrain::report {

namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string Describe(const FlightOp& op) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s #%lld of %lld bytes on group '%s' at step %lld", op.op.c_str(),
                static_cast<long long>(op.seq), static_cast<long long>(op.bytes), op.group.c_str(),
                static_cast<long long>(op.step));
  return buf;
}

std::string RankList(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// The operation a rank whose watchdog fired was stuck in: its oldest one not done.
const FlightOp* Stuck(const FlightFile& f) {
  for (const FlightOp& op : f.ops) {
    if (op.state != "done") return &op;
  }
  return nullptr;
}

// What member `m` did about the stuck operation, by its own record of the
// same group (the same members).
std::string MemberLine(const FlightFile* mf, int64_t m, const FlightOp& stuck,
                       const std::vector<int64_t>& members, bool* never_entered) {
  *never_entered = true;
  if (mf == nullptr) {
    return "rank " + std::to_string(m) + ": no flight record (it died, or hung without being signalled)";
  }
  auto g = mf->groups.find(stuck.group);
  const FlightOp* last = nullptr;
  const FlightOp* same = nullptr;
  if (g != mf->groups.end() && g->second == members) {
    for (const FlightOp& op : mf->ops) {
      if (op.group != stuck.group) continue;
      last = &op;
      if (op.seq == stuck.seq) same = &op;
    }
  }
  std::string who = "rank " + std::to_string(m) + " (" + mf->host + ")";
  if (same != nullptr) {
    *never_entered = false;
    return who + (same->state == "done" ? ": finished it" : ": entered it and waited") +
           (StartsWith(mf->reason, "watchdog") ? " (its watchdog fired)" : " (" + mf->reason + ")");
  }
  if (last == nullptr) {
    return who + ": never entered it (no operation on group '" + stuck.group + "' in its last " +
           std::to_string(mf->ops.size()) + " records; stopped by " + mf->reason + ")";
  }
  if (last->seq > stuck.seq) {
    *never_entered = false;
    return who + ": had gone past it (its last: " + Describe(*last) + ")";
  }
  const FlightOp& newest = mf->ops.back();
  return who + ": never entered it; its last operation on the group was " + Describe(*last) +
         ", its newest of all " + Describe(newest) + " (" + newest.state + "); stopped by " + mf->reason;
}

// Each rank that died of a fatal signal, named as a culprit with its last
// operation.
void AddFatalSignals(const std::vector<FlightFile>& files, HangDiagnosis& d) {
  for (const FlightFile& f : files) {
    if (!StartsWith(f.reason, "fatal signal")) continue;
    d.hang = true;
    d.culprits.push_back(f.rank);
    std::string line = "rank " + std::to_string(f.rank) + " (" + f.host + ") died of " + f.reason.substr(6);
    if (!f.ops.empty()) line += "; its last operation: " + Describe(f.ops.back()) + " (" + f.ops.back().state + ")";
    d.details.push_back(line);
  }
}

// The earliest operation a watchdog fired in, and the record it is in; null
// when no watchdog fired.
struct StuckOp {
  const FlightFile* file = nullptr;
  const FlightOp* op = nullptr;
};

StuckOp EarliestStuck(const std::vector<FlightFile>& files) {
  StuckOp earliest;
  for (const FlightFile& f : files) {
    if (!StartsWith(f.reason, "watchdog")) continue;
    const FlightOp* op = Stuck(f);
    if (op != nullptr && (earliest.op == nullptr || op->issued_ns < earliest.op->issued_ns)) {
      earliest = {&f, op};
    }
  }
  return earliest;
}

// The stuck operation's group as the rank that recorded it knew it (itself
// alone if its record lacks the group).
std::vector<int64_t> MembersOf(const StuckOp& stuck) {
  const auto g = stuck.file->groups.find(stuck.op->group);
  return g != stuck.file->groups.end() ? g->second : std::vector<int64_t>{stuck.file->rank};
}

// A line per member of the stuck group; returns those that never entered it.
std::vector<int64_t> DescribeMembers(const std::vector<FlightFile>& files, const StuckOp& stuck,
                                     const std::vector<int64_t>& members, HangDiagnosis& d) {
  std::map<int64_t, const FlightFile*> by_rank;
  for (const FlightFile& f : files) by_rank[f.rank] = &f;
  std::vector<int64_t> never;
  for (int64_t m : members) {
    auto it = by_rank.find(m);
    bool missing = false;
    d.details.push_back(
        MemberLine(it == by_rank.end() ? nullptr : it->second, m, *stuck.op, members, &missing));
    if (missing) never.push_back(m);
  }
  return never;
}

}  // namespace

HangDiagnosis DiagnoseHang(const std::vector<FlightFile>& files) {
  HangDiagnosis d;
  if (files.empty()) return d;
  // A fatal signal names its rank directly.
  AddFatalSignals(files, d);
  const StuckOp stuck = EarliestStuck(files);
  if (stuck.op == nullptr) {
    if (d.hang) {
      d.summary = d.details.front();
    } else {
      d.summary =
          "flight records from a stop (" + files.front().reason + "); no rank reported a hang";
    }
    return d;
  }
  d.hang = true;
  const std::vector<int64_t> members = MembersOf(stuck);
  const std::vector<int64_t> never = DescribeMembers(files, stuck, members, d);
  for (int64_t m : never) {
    if (std::find(d.culprits.begin(), d.culprits.end(), m) == d.culprits.end()) d.culprits.push_back(m);
  }
  d.summary = "the job stuck in " + Describe(*stuck.op) + " (ranks " + RankList(members) + "): ";
  d.summary += never.empty() ? "every member entered it (a lost message or a network fault?)"
                             : (never.size() == 1 ? "rank " : "ranks ") + RankList(never) + " never entered it";
  return d;
}

}  // namespace scaletrain::report
