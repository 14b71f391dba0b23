// How the planner's answers are written: a stable JSON form (documented in
// docs/planner.md), a text form for people, and an SVG plot of a sweep.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "plan/cost_model.h"
#include "plan/goodput.h"
#include "plan/search.h"
#include "plan/sizing.h"
#include "plan/validate.h"

namespace scaletrain::plan {

struct PlanContext {
  const CostModel* model = nullptr;
  int64_t params = 0;  // from the parameter layout
};

nlohmann::json PlanToJson(const PlanContext& ctx, const Prediction& p, const Sizing* sizing);
nlohmann::json SearchToJson(const PlanContext& ctx, const SearchResult& r, const SizingOptions& so);
nlohmann::json SweepToJson(const PlanContext& ctx, const std::vector<SweepPoint>& pts);
nlohmann::json ValidationToJson(const ValidationReport& r);

std::string PlanToText(const PlanContext& ctx, const Prediction& p, const Sizing* sizing);
std::string SearchToText(const PlanContext& ctx, const SearchResult& r);
std::string SweepToText(const PlanContext& ctx, const std::vector<SweepPoint>& pts);
std::string ValidationToText(const ValidationReport& r);

// The goodput of a plan (plan --mtbf-hours): the "goodput" object of the
// plan's JSON, and its lines of the text (report_goodput.cpp).
nlohmann::json GoodputToJson(const Goodput& g);
std::string GoodputToText(const Goodput& g);

// Two panels: tokens/s against GPUs (log-log, with the ideal line from the
// first point), and where the step time goes at each GPU count.
std::string SweepToSvg(const PlanContext& ctx, const std::vector<SweepPoint>& pts);

}  // namespace scaletrain::plan
