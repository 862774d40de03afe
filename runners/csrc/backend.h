// collsched's torch.distributed backend in C++: a c10d::Backend whose collectives return Work objects (work.h)
// holding a c10::ivalue::Future that the backend's own C++ worker thread completes.
//
// Every collective becomes a job on the group's one worker thread, a FIFO (collectives complete in issue
// order, async_op returns at once). A job is either
//   - native: a dense, contiguous CPU tensor of a signature (kind, sizes, dtype, op, root) that the Python
//     policy serves with a schedule. The first call of a signature runs on the worker and asks Python once
//     (with the GIL: runners.backend.cpp.Core.prepare, which chooses the schedule, compiles its plan and checks
//     the ranks' arguments, each once) for a Spec (the plan and its buffer layout); the Spec is cached and the
//     call runs natively at once. A later call runs with no Python at all (buffers bound, plan run over the
//     inner gloo group, AVG divided, results copied back, the future completed), checked in band (check.h);
//     a small synchronous one (async_op=False) runs in the caller's thread once the queue ahead of it has
//     drained, so an async_op=True call always returns at once and its wait(timeout) holds. Or
//   - python: everything else (other shapes and kinds, CUDA tensors, a signature Python declines, such as the
//     direct fallback): the worker takes the GIL and runs the Python backend's own body for the call
//     (runners.backend.group.CollschedProcessGroup, made with an inline queue), so every feature of the Python
//     backend keeps working, in issue order.
// A native failure is turned into the Python executor's RunError / RunTimeout (naming step, transfer and
// peer) by Core.native_failure, and every failure surfaces through Work::wait() and the future.

#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check.h"
#include "plan.h"
#include "work.h"

namespace collsched {

using c10d::OpType;

// What Python's prepare (runners.backend.cpp.Core.prepare) answers for a signature the native path serves: the
// compiled plan and the buffer layout (runners.execution.buffers' Buffers, as numbers), named on both sides:
// Python builds it with keyword arguments (collsched_native.Spec(plan=..., s=..., ...)), every field required.
struct Spec {
  std::shared_ptr<Plan> plan;
  int64_t s = 0;        // elements per chunk: ceil(n / c)
  int64_t n = 0;        // elements per rank (the runner's N)
  int64_t c = 1;        // chunks per rank-sized segment (the schedule's C)
  int64_t in_segs = 0;  // segments of the input buffer (0: the rank has none)
  bool in_copy = false;      // the input is worked on in a padded copy (or a copy the schedule may write)
  bool in_initial = true;    // that copy starts with the caller's data (not a broadcast's non-root)
  int64_t out_segs = 0;      // segments of the output buffer (0: in place, or none)
  bool out_copy = false;     // the output is worked on in a padded copy
  bool in_place = false;     // the kind is in place: the input buffer is the output
  int64_t scratch = 0;       // elements of scratch
  int64_t budget_bytes = 0;  // staging bytes the plan's staged receives may hold at once
  int64_t op = 0;            // runners.execution.arguments.OP_NAMES index
  bool dataflow = true;      // the dataflow engine (else grouped)
  bool divide = false;       // AVG: divide the result by the group size afterwards
  bool clone_input = false;  // the rank's input must not be written (a reduce's non-root): work on a clone
  bool barrier = false;      // a barrier: one token, no data
  std::string label;         // "kind/algorithm" for the group's executed counts
  int64_t index = -1;        // Core's list of prepared plans: what native_failure names a failure with
  // The argument check after the first call (check.h; false: COLLSCHED_CHECK=0, no salt, no watch), this rank's
  // metadata row (12 fields) and the bit position of the tags' salt.
  bool checked = false;
  std::vector<int64_t> row;
  int64_t shift = 0;
  // The check of the call that prepared the signature, its rows already exchanged by prepare (None: unchecked):
  // that call runs with it, and the cached Spec drops it; a later call makes its own (`checked`).
  std::shared_ptr<Check> first_check;

  static std::shared_ptr<Spec> from_kwargs(const py::kwargs& kw);
};

// Spec's fields, once: for from_kwargs and for the Python attributes (bindings.cpp).
#define COLLSCHED_SPEC_FIELDS(X)                                                                                 \
  X(std::shared_ptr<Plan>, plan) X(int64_t, s) X(int64_t, n) X(int64_t, c) X(int64_t, in_segs) X(bool, in_copy) \
  X(bool, in_initial) X(int64_t, out_segs) X(bool, out_copy) X(bool, in_place) X(int64_t, scratch)              \
  X(int64_t, budget_bytes) X(int64_t, op) X(bool, dataflow) X(bool, divide) X(bool, clone_input) X(bool, barrier) \
  X(std::string, label) X(int64_t, index) X(bool, checked) X(std::vector<int64_t>, row) X(int64_t, shift)       \
  X(std::shared_ptr<Check>, first_check)

// How many collectives ran natively, per "kind/algorithm" (Python folds them into group.executed).
class Counts {
 public:
  void add(const std::string& label) {
    std::lock_guard<std::mutex> g(m_);
    ++counts_[label];
  }
  std::unordered_map<std::string, int64_t> items() {
    std::lock_guard<std::mutex> g(m_);
    return counts_;
  }

 private:
  std::mutex m_;
  std::unordered_map<std::string, int64_t> counts_;
};

// A signature: what the answer of prepare() depends on.
struct Key {
  int kind, dtype, op;
  int64_t in, out, root;
  bool operator==(const Key& o) const {
    return kind == o.kind && dtype == o.dtype && op == o.op && in == o.in && out == o.out && root == o.root;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.in) * 1000003u ^ std::hash<int64_t>()(k.out);
    return h * 31u + static_cast<size_t>(k.kind * 4096 + k.dtype * 64 + k.op) + static_cast<size_t>(k.root) * 7u;
  }
};

// Kinds as runners.backend.cpp.KINDS names them.
enum Kind : int { ALLREDUCE = 0, BROADCAST = 1, REDUCE = 2, ALLGATHER = 3, REDUCESCATTER = 4, ALLTOALL = 5,
                  BARRIER = 6 };

class Backend : public c10d::Backend {
 public:
  Backend(int rank, int size, py::object core, c10::intrusive_ptr<c10d::ProcessGroup> inner, double seconds,
          std::shared_ptr<Counts> counts, bool native, c10::intrusive_ptr<c10d::Store> store, double stall_s,
          int64_t inline_bytes, int64_t cache_limit);
  ~Backend() override;

  const std::string getBackendName() const override { return "collsched"; }
  void shutdown() override;
  void abort() override { shutdown(); }

  // Collectives served natively where their signature allows (backend.cpp), else by the Python body.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // The Python backend's bodies serve the rest, on the worker thread, in issue order.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;

  // Point-to-point: handed through to the Python group at once.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // The coalescing manager.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setTimeout(Ms timeout) override { seconds_ = static_cast<double>(timeout.count()) / 1000.0; }

  py::object core() const { return core_; }
  int64_t native_signatures();
  // (signatures cached, of which served natively, evicted Specs still held by a queued or running call, calls
  // run in the caller's thread so far): what the tests of the cache's bound and of the inline path read.
  std::vector<int64_t> cache_counts();

 private:
  static bool simple(const at::Tensor& t) {
    return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.is_contiguous() &&
           !t.is_sparse() && t.numel() > 0;
  }
  bool valid_root(int64_t root) const { return root >= 0 && root < getSize(); }
  double seconds_of(Ms timeout) const {
    return timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : seconds_;
  }

  // A call the native path may serve: its signature, its tensors, what its Work returns and its time limit.
  struct NativeCall {
    Key key;
    at::Tensor input, output;
    std::vector<at::Tensor> results;
    double seconds;
    bool async_op;  // torch's opts.asyncOp: false for dist.all_reduce(..., async_op=False) and the like
  };
  // The Python backend's body for a call (Core.serve), run on the worker thread with the GIL.
  using Body = std::function<std::vector<at::Tensor>()>;

  NativeCall native_call(int kind, const at::Tensor& input, const at::Tensor& output, std::vector<at::Tensor> results,
                         int op, int64_t root, Ms timeout, bool async_op) const;
  // The cached answer for a signature: none (never prepared), null (the Python body serves it) or its Spec.
  std::optional<std::shared_ptr<Spec>> cached(const Key& key);
  void remember(const Key& key, const std::shared_ptr<Spec>& spec);
  // Before a miss is asked: a full cache (cache_limit_ signatures, runners.backend.cpp.SIGNATURE_CACHE) is
  // emptied, its Specs retired; retired Specs no call holds any more are the indices Python may forget.
  void make_room();
  std::vector<int64_t> released();
  // Core.prepare, with the GIL: the answer for the signature of `call` (null: the Python body serves it).
  std::shared_ptr<Spec> ask(const NativeCall& call);
  // The in-band check of a call after the first of its signature (null: unchecked).
  std::shared_ptr<Check> later_check(const Spec& sp);
  void track(const c10::intrusive_ptr<Work>& work);
  c10::intrusive_ptr<c10d::Work> native(OpType type, const char* what, std::shared_ptr<Spec> spec, NativeCall call);
  c10::intrusive_ptr<c10d::Work> first(OpType type, const char* what, NativeCall call, Body body);
  c10::intrusive_ptr<c10d::Work> python(OpType type, const char* what, Body body);
  void run_native(const Spec& sp, const NativeCall& call, double seconds, const std::shared_ptr<Check>& check);

  // A collective: natively when `call` is set (its tensors allow it) and its signature is, or is being, prepared;
  // else the Python backend's `method` with `args`.
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> dispatch(OpType type, const char* what, const std::optional<NativeCall>& call,
                                          const char* method, Args... args) {
    if (call && native_ && call->key.op >= 0) {
      auto hit = cached(call->key);
      if (!hit) return first(type, what, *call, python_body(method, args...));
      if (*hit) return native(type, what, *hit, *call);
    }
    return python(type, what, python_body(method, args...));
  }

  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> python(OpType type, const char* what, const char* method, Args... args) {
    return python(type, what, python_body(method, args...));
  }

  template <typename... Args>
  Body python_body(const char* method, Args... args) {
    std::string name = method;
    return [this, name, args...] {
      py::gil_scoped_acquire gil;
      return core_.attr("serve")(name, py::make_tuple(args...)).template cast<std::vector<at::Tensor>>();
    };
  }

  py::object core_;
  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  c10::intrusive_ptr<c10d::Store> store_;  // the inner group's store: where a stalled checked run writes its row
  double stall_s_;
  double seconds_;
  std::shared_ptr<Counts> counts_;
  bool native_;
  int64_t inline_bytes_;  // COLLSCHED_INLINE_BYTES: the largest native collective run in the caller's thread
  std::shared_ptr<Queue> queue_;
  std::mutex cache_m_;
  std::unordered_map<Key, std::shared_ptr<Spec>, KeyHash> cache_;
  int64_t cache_limit_;
  std::vector<std::pair<int64_t, std::weak_ptr<Spec>>> retired_;  // (Core's index, Spec) evicted, maybe held
  std::atomic<int64_t> inline_runs_{0};
  at::Tensor arena_;  // the staging buffer of this group's native runs, kept between them (the worker's only)
  std::mutex coalescing_m_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<Work>> coalesced_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> closed_{false};
};

// What torch's creator returns: a c10d::Backend (runners.backend.cpp.wrap).
c10::intrusive_ptr<c10d::Backend> make_backend(int rank, int size, py::object core,
                                               const c10::intrusive_ptr<c10d::ProcessGroup>& inner, double seconds,
                                               std::shared_ptr<Counts> counts, bool native,
                                               c10::intrusive_ptr<c10d::Store> store, double stall_s,
                                               int64_t inline_bytes, int64_t cache_limit);

}  // namespace collsched
