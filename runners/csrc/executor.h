// The native executor (executor.cpp): Plan::run (plan.h), and the two other things that post messages from C++.

#pragma once

#include "plan.h"

namespace collsched {

// The runner's cross-rank argument check in one round: this rank's metadata row to every peer and every
// peer's row into `rows` (p x k int64), all posted at once, receives waited on first (a missing peer is
// then the one named). Returns (status, peer, text); on nccl, whose pairs match in posting order, both
// ends of a pair post its two messages in the same global order (src, then dst).
Outcome exchange_rows(const at::Tensor& mine, const at::Tensor& rows, int64_t rank,
                      const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t tag, double seconds,
                      std::shared_ptr<Check> check);

// The transport's own cost of a plan's messages, for benchmarks/bench_native.py's host-overhead row: each
// step's sends and receives (rows: step, role, peer, bytes, tag; in step order) posted straight to the
// backend and waited on, `repeats` times, with no plan, no dependencies, no staging and no arithmetic.
// What an executor spends beyond this, per step, is its own overhead.
// One Work's wait under a run's stall watch (check.h), for the Python executors: (status, text), status as
// Plan::run's (OK, FAILED, MISMATCH with the rows seen, PEER_FAILED with "rank:what it said"). Never throws.
std::tuple<int, std::string> wait_watched(const std::shared_ptr<Check>& check,
                                          const c10::intrusive_ptr<c10d::Work>& work, double seconds);

void transport_floor(const std::vector<std::vector<int64_t>>& rows, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                     int64_t repeats);

}  // namespace collsched
