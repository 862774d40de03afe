// One rank's compiled plan (runners.execution.plan.RankPlan, as arrays), converted once by
// runners/execution/native.py's NativePlan and run by the executor (executor.h).

#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "check.h"

namespace collsched {

enum Role : int { SEND = 0, RECV = 1, LOCAL = 2 };
// MISMATCH: the stall watch found ranks whose arguments differ (check.h); text: the rows seen. PEER_FAILED: it
// found a peer's note that its run of this call failed; text: "rank:what it said".
enum Status : int { OK = 0, FAILED = 1, TIMED_OUT = 2, INTERNAL = 3, MISMATCH = 4, PEER_FAILED = 5 };
// Op codes: runners.execution.arguments.OP_NAMES indices; TOKEN: a barrier's token (no arithmetic).
enum OpCode : int { SUM = 0, PRODUCT = 1, MIN = 2, MAX = 3, AVG = 4, BAND = 5, BOR = 6, BXOR = 7, TOKEN = -2 };

// One transfer as this rank sees it (runners.execution.plan.Item; buffers: 0 input, 1 output, 2 scratch).
struct Item {
  int64_t tag, step, role, peer, staged, src_buf, src_index, dst_buf, dst_index, count, reduce;
};

// What a run answers: OK, or a failure with the item it concerns (-1: none) and the backend's text.
using Outcome = std::tuple<int, int64_t, std::string>;

class Plan {
 public:
  // items: rows of Item's 11 fields; deps / after / dependents / readers: per item, indices into items
  // (RankPlan's); staged_recvs: the staged receives in posting order; budget: chunks of staged receives in flight.
  Plan(const std::vector<std::vector<int64_t>>& items, std::vector<std::vector<int64_t>> deps,
       std::vector<std::vector<int64_t>> after, std::vector<std::vector<int64_t>> dependents,
       std::vector<std::vector<int64_t>> readers, std::vector<int64_t> staged_recvs, int64_t budget);

  int64_t size() const { return static_cast<int64_t>(items_.size()); }

  // Runs the plan on bufs (input, output, scratch; chunks of s elements) over pg's backend for the buffers'
  // device, within `seconds`; `dataflow` chooses the engine (executor.cpp), `check` the in-band check (null:
  // an unchecked run). Never throws: a failure comes back as its Outcome.
  Outcome run(const std::vector<at::Tensor>& bufs, int64_t s, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
              const at::Tensor& arena, int64_t op, double seconds, bool dataflow,
              std::shared_ptr<Check> check) const;

  const std::vector<Item>& items() const { return items_; }
  const std::vector<int64_t>& ndeps() const { return ndeps_; }
  const std::vector<int64_t>& nafter() const { return nafter_; }
  const std::vector<std::vector<int64_t>>& dependents() const { return dependents_; }
  const std::vector<std::vector<int64_t>>& readers() const { return readers_; }
  const std::vector<int64_t>& staged_recvs() const { return staged_recvs_; }
  int64_t budget() const { return budget_; }

 private:
  std::vector<Item> items_;
  std::vector<int64_t> ndeps_, nafter_;
  std::vector<std::vector<int64_t>> dependents_, readers_;
  std::vector<int64_t> staged_recvs_;
  int64_t budget_;
};

}  // namespace collsched
