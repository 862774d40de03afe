// The C++ backend's collectives (backend.h): a signature's cached answer runs natively, anything else runs the
// Python backend's body on the worker thread.

#include "backend.h"

#include <torch/csrc/DynamicTypes.h>

#include <algorithm>

namespace collsched {

namespace {

// runners.execution.arguments.OP_NAMES index of a c10d op; -1: not one the executor knows (Python raises its error).
int op_code(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return 0;
    case c10d::ReduceOp::PRODUCT: return 1;
    case c10d::ReduceOp::MIN: return 2;
    case c10d::ReduceOp::MAX: return 3;
    case c10d::ReduceOp::AVG: return 4;
    case c10d::ReduceOp::BAND: return 5;
    case c10d::ReduceOp::BOR: return 6;
    case c10d::ReduceOp::BXOR: return 7;
    default: return -1;
  }
}

// Buffers.bind of runners.execution.buffers: the caller's tensor, or a padded copy to copy back afterwards.
at::Tensor bind_buffer(const Spec& sp, const at::Tensor& user, int64_t segs, bool writable, bool copy, bool initial,
                       std::vector<std::pair<at::Tensor, at::Tensor>>& back) {
  at::Tensor flat = user.view(-1);
  if (!copy) return flat;
  at::Tensor work = at::zeros({segs * sp.c * sp.s}, user.options());  // padding is reduced too: finite
  at::Tensor real = work.view({segs, -1}).narrow(1, 0, sp.n);
  if (initial) real.copy_(flat.view({segs, sp.n}));
  if (writable) back.emplace_back(flat.view({segs, sp.n}), real);
  return work;
}

}  // namespace

Backend::Backend(int rank, int size, py::object core, c10::intrusive_ptr<c10d::ProcessGroup> inner, double seconds,
                 std::shared_ptr<Counts> counts, bool native, c10::intrusive_ptr<c10d::Store> store, double stall_s,
                 int64_t inline_bytes)
    : c10d::Backend(rank, size),
      core_(std::move(core)),
      inner_(std::move(inner)),
      store_(std::move(store)),
      stall_s_(stall_s),
      seconds_(seconds),
      counts_(std::move(counts)),
      native_(native),  // false: every call takes the Python path
      inline_bytes_(inline_bytes),
      queue_(std::make_shared<Queue>("r" + std::to_string(rank))) {}

Backend::~Backend() {
  shutdown();
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    core_ = py::object();
  } else {
    core_.release();  // the interpreter is gone: nothing to release the reference to
  }
}

void Backend::shutdown() {
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;  // queued Python jobs need the GIL to finish
    queue_->close();
  } else {
    queue_->close();
  }
  if (!closed_.exchange(true) && Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    try {
      core_.attr("shutdown")();  // the Python group's inner gloo groups
    } catch (py::error_already_set& e) {  // at interpreter exit: nothing left to release
      e.discard_as_unraisable("collsched backend shutdown");
    }
  }
}

// ------------------------------------------------------------------ collectives

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && simple(tensors[0]) && !opts.sparseIndices.has_value()) {
    const at::Tensor& t = tensors[0];
    auto spec = lookup(ALLREDUCE, t, t.numel(), -1, op_code(opts.reduceOp), -1);
    if (spec) return native(OpType::ALLREDUCE, "allreduce", spec, t, at::Tensor(), {t}, opts.timeout);
  }
  return python(OpType::ALLREDUCE, "allreduce", "allreduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
    const at::Tensor& t = tensors[0];
    auto spec = lookup(BROADCAST, t, t.numel(), -1, 0, opts.rootRank);
    if (spec) return native(OpType::BROADCAST, "broadcast", spec, t, at::Tensor(), {t}, opts.timeout);
  }
  return python(OpType::BROADCAST, "broadcast", "broadcast", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
    const at::Tensor& t = tensors[0];
    auto spec = lookup(REDUCE, t, t.numel(), -1, op_code(opts.reduceOp), opts.rootRank);
    if (spec) return native(OpType::REDUCE, "reduce", spec, t, at::Tensor(), {t}, opts.timeout);
  }
  return python(OpType::REDUCE, "reduce", "reduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
      output.numel() == input.numel() * getSize()) {
    auto spec = lookup(ALLGATHER, input, input.numel(), output.numel(), 0, -1);
    if (spec) return native(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", spec, input, output, {output},
                            opts.timeout);
  }
  return python(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", "_allgather_base", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
      input.numel() == output.numel() * getSize()) {
    auto spec = lookup(REDUCESCATTER, input, input.numel(), output.numel(), op_code(opts.reduceOp), -1);
    if (spec) return native(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", spec, input, output, {output},
                            opts.timeout);
  }
  return python(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", "_reduce_scatter_base", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& out_splits, std::vector<int64_t>& in_splits,
                                                      const c10d::AllToAllOptions& opts) {
  if (out_splits.empty() && in_splits.empty() && simple(input) && simple(output) &&
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() && input.dim() > 0 &&
      input.size(0) % getSize() == 0 && output.size(0) % getSize() == 0) {
    auto spec = lookup(ALLTOALL, input, input.numel(), output.numel(), 0, -1);
    if (spec) return native(OpType::ALLTOALL_BASE, "all_to_all_single", spec, input, output, {output}, opts.timeout);
  }
  return python(OpType::ALLTOALL_BASE, "all_to_all_single", "alltoall_base", output, input, out_splits, in_splits,
                opts);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  auto spec = lookup(BARRIER, at::Tensor(), 0, -1, 0, -1);
  if (spec) return native(OpType::BARRIER, "barrier", spec, at::Tensor(), at::Tensor(), {}, opts.timeout);
  return python(OpType::BARRIER, "barrier", "barrier", opts);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  return python(OpType::_ALLREDUCE_SPARSE, "allreduce", "allreduce", tensors, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceCoalescedOptions& opts) {
  return python(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", "allreduce_coalesced", tensors, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return python(OpType::ALLGATHER, "allgather", "allgather", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  return python(OpType::ALLGATHER_COALESCED, "allgather_coalesced", "allgather_coalesced", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                        std::vector<at::Tensor>& inputs,
                                                                        const c10d::AllgatherOptions& opts) {
  return python(OpType::COALESCED, "all_gather_into_tensor_coalesced", "allgather_into_tensor_coalesced", outputs,
                inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  return python(OpType::GATHER, "gather", "gather", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  return python(OpType::SCATTER, "scatter", "scatter", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  return python(OpType::REDUCE_SCATTER, "reduce_scatter", "reduce_scatter", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                        std::vector<at::Tensor>& inputs,
                                                                        const c10d::ReduceScatterOptions& opts) {
  return python(OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced",
                "reduce_scatter_tensor_coalesced", outputs, inputs, opts);
}
c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  return python(OpType::ALLTOALL, "all_to_all", "alltoall", outputs, inputs, opts);
}

// ------------------------------------------------------------------ point-to-point: handed through, at once

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  py::gil_scoped_acquire gil;
  return core_.attr("send")(tensors, dst, tag).cast<c10::intrusive_ptr<c10d::Work>>();
}
c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  py::gil_scoped_acquire gil;
  return core_.attr("recv")(tensors, src, tag).cast<c10::intrusive_ptr<c10d::Work>>();
}
c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  py::gil_scoped_acquire gil;
  return core_.attr("recv_anysource")(tensors, tag).cast<c10::intrusive_ptr<c10d::Work>>();
}
void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  py::gil_scoped_acquire gil;
  core_.attr("monitored_barrier")(opts.timeout, wait_all_ranks);
}

// ------------------------------------------------------------------ coalescing manager

void Backend::startCoalescing() {
  std::lock_guard<std::mutex> g(coalescing_m_);
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> Backend::endCoalescing() {
  std::vector<c10::intrusive_ptr<Work>> works;
  {
    std::lock_guard<std::mutex> g(coalescing_m_);
    coalescing_ = false;
    works.swap(coalesced_);
  }
  auto work = c10::make_intrusive<Work>(OpType::COALESCED, "coalesced", queue_);
  queue_->submit([work, works] {
    for (const auto& w : works) {  // all finished already: the queue runs in issue order
      auto e = w->exception();
      if (e) {
        work->fail(e);
        return;
      }
    }
    work->finish({});
  });
  return work;
}

int64_t Backend::native_signatures() {
  std::lock_guard<std::mutex> g(cache_m_);
  int64_t k = 0;
  for (const auto& [key, spec] : cache_) k += spec ? 1 : 0;
  return k;
}

void Backend::track(const c10::intrusive_ptr<Work>& work) {
  std::lock_guard<std::mutex> g(coalescing_m_);
  if (coalescing_) coalesced_.push_back(work);
  ++seq_;
}

// ------------------------------------------------------------------ the native path

// The cached answer for a signature (asking Python once on a miss); null: the Python path serves it.
std::shared_ptr<Spec> Backend::lookup(int kind, const at::Tensor& ref, int64_t in, int64_t out, int op, int64_t root) {
  if (!native_ || op < 0) return nullptr;
  int dtype = ref.defined() ? static_cast<int>(ref.scalar_type()) : -1;
  Key key{kind, dtype, op, in, out, root};
  {
    std::lock_guard<std::mutex> g(cache_m_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  std::shared_ptr<Spec> spec;
  {
    py::gil_scoped_acquire gil;
    py::object dt = ref.defined() ? py::reinterpret_borrow<py::object>(
                                        reinterpret_cast<PyObject*>(torch::getTHPDtype(ref.scalar_type())))
                                  : py::none();
    py::object answer = core_.attr("prepare")(kind, in, out, dt, op, root);
    if (!answer.is_none()) spec = answer.cast<std::shared_ptr<Spec>>();
  }
  std::lock_guard<std::mutex> g(cache_m_);
  if (cache_.size() >= 256) cache_.clear();  // a cheap bound: shapes that keep changing are rare
  cache_[key] = spec;
  // The argument check (COLLSCHED_CHECK, on by default): the first call of a signature runs the Python
  // path, whose cross-rank check compares every rank's arguments; later calls of the signature run
  // natively, checked in band (salted tags and the stall watch of check.h).
  return spec && spec->checked ? nullptr : spec;
}

std::shared_ptr<Spec> Spec::from_kwargs(const py::kwargs& kw) {
  auto spec = std::make_shared<Spec>();
  size_t taken = 0;
#define COLLSCHED_TAKE(type, name)                                             \
  if (!kw.contains(#name)) throw py::type_error("collsched Spec: no " #name); \
  spec->name = kw[#name].cast<type>();                                         \
  ++taken;
  COLLSCHED_SPEC_FIELDS(COLLSCHED_TAKE)
#undef COLLSCHED_TAKE
  if (taken != kw.size()) {
    std::string unknown;
    for (const auto& item : kw) {
      std::string key = py::str(item.first);
#define COLLSCHED_KNOWN(type, name) || key == #name
      if (!(false COLLSCHED_SPEC_FIELDS(COLLSCHED_KNOWN))) unknown += (unknown.empty() ? "" : ", ") + key;
#undef COLLSCHED_KNOWN
    }
    throw py::type_error("collsched Spec: unknown fields " + unknown);
  }
  return spec;
}

c10::intrusive_ptr<c10d::Work> Backend::native(OpType type, const char* what, std::shared_ptr<Spec> spec,
                                               at::Tensor input, at::Tensor output, std::vector<at::Tensor> results,
                                               Ms timeout) {
  auto work = c10::make_intrusive<Work>(type, what, queue_);
  double seconds = seconds_of(timeout);
  auto job = [this, work, spec, input, output, results, seconds] {
    try {
      run_native(*spec, input, output, seconds);
      counts_->add(spec->label);
      work->finish(results);
    } catch (...) {
      work->fail(capture());
    }
  };
  // A small collective with nothing ahead of it runs in the caller's thread: two thread hand-offs (to
  // the worker and back) are most of a small collective's time on a loaded host. The caller holds no
  // GIL (torch's bindings release it), and no callback can be chained yet, so the Work is simply
  // complete when it is returned. A caller holding the GIL, or a larger message, goes to the worker.
  int64_t bytes = std::max(input.defined() ? input.nbytes() : 0, output.defined() ? output.nbytes() : 0);
  if (bytes <= inline_bytes_ && !PyGILState_Check() && queue_->begin_inline()) {
    job();
    queue_->end_inline();
  } else {
    queue_->submit(std::move(job));
  }
  track(work);
  return work;
}

void Backend::run_native(const Spec& sp, const at::Tensor& user_in, const at::Tensor& output, double seconds) {
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor in, out, scratch;
  if (sp.barrier) {
    in = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  } else {
    at::Tensor user = sp.clone_input ? user_in.clone() : user_in;
    if (sp.in_segs > 0) in = bind_buffer(sp, user, sp.in_segs, sp.in_place, sp.in_copy, sp.in_initial, back);
    if (sp.in_place) {
      out = in.defined() ? in : at::empty({0}, user.options());
    } else if (sp.out_segs > 0) {
      out = bind_buffer(sp, output, sp.out_segs, true, sp.out_copy, false, back);
    }
  }
  const at::Tensor& ref = in.defined() ? in : out;
  if (sp.scratch > 0) scratch = at::empty({sp.scratch}, ref.options());
  if (arena_.numel() < sp.budget_bytes) arena_ = at::empty({sp.budget_bytes}, at::TensorOptions().dtype(at::kByte));
  std::vector<at::Tensor> bufs{in.defined() ? in : ref, out.defined() ? out : ref, scratch.defined() ? scratch : ref};
  std::shared_ptr<Check> check;
  if (sp.checked) {  // as runners.execution.runner.run's checked call of a signature it checked before
    int64_t counter = next_call(inner_);
    std::vector<int64_t> row = sp.row;
    row.push_back(1);  // checked before
    int64_t salt = salt_of(row, counter, sp.shift);
    check = Check::make(store_, counter, std::move(row), getRank(), getSize(), salt, stall_s_);
  }
  auto started = Clock::now();
  auto [status, item, text] = sp.plan->run(bufs, sp.s, inner_, arena_, sp.barrier ? TOKEN : sp.op, seconds,
                                           sp.dataflow, check);
  if (status != OK) {
    bool late = Clock::now() - started >= std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)) - Ms(10);
    py::gil_scoped_acquire gil;
    core_.attr("native_failure")(sp.index, status, item, text, late, seconds);  // raises the Python executor's error
    throw std::runtime_error("collsched: native_failure did not raise");
  }
  for (auto& [user, real] : back) user.copy_(real);
  if (sp.divide) {
    at::Tensor result = sp.in_place ? user_in : output;
    (result.is_complex() ? at::view_as_real(result) : result).div_(getSize());
  }
}

c10::intrusive_ptr<c10d::Backend> make_backend(int rank, int size, py::object core,
                                               const c10::intrusive_ptr<c10d::ProcessGroup>& inner, double seconds,
                                               std::shared_ptr<Counts> counts, bool native,
                                               c10::intrusive_ptr<c10d::Store> store, double stall_s,
                                               int64_t inline_bytes) {
  return c10::make_intrusive<Backend>(rank, size, std::move(core), inner, seconds, std::move(counts), native,
                                      std::move(store), stall_s, inline_bytes);
}

}  // namespace collsched
