// A RankPlan's arrays as a Plan (plan.h); running it is executor.cpp's.

#include "plan.h"

#include <c10/util/Exception.h>

namespace collsched {

Plan::Plan(const std::vector<std::vector<int64_t>>& items, std::vector<std::vector<int64_t>> deps,
           std::vector<std::vector<int64_t>> after, std::vector<std::vector<int64_t>> dependents,
           std::vector<std::vector<int64_t>> readers, std::vector<int64_t> staged_recvs, int64_t budget)
    : dependents_(std::move(dependents)), readers_(std::move(readers)), staged_recvs_(std::move(staged_recvs)),
      budget_(budget) {
  for (const auto& r : items) {
    TORCH_CHECK(r.size() == 11, "collsched native plan: an item needs 11 fields, got ", r.size());
    items_.push_back({r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10]});
  }
  for (const auto& d : deps) ndeps_.push_back(static_cast<int64_t>(d.size()));
  for (const auto& a : after) nafter_.push_back(static_cast<int64_t>(a.size()));
}

}  // namespace collsched
