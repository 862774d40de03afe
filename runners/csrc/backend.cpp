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
                 int64_t inline_bytes, int64_t cache_limit)
    : c10d::Backend(rank, size),
      core_(std::move(core)),
      inner_(std::move(inner)),
      store_(std::move(store)),
      stall_s_(stall_s),
      seconds_(seconds),
      counts_(std::move(counts)),
      native_(native),  // false: every call takes the Python path
      inline_bytes_(inline_bytes),
      queue_(std::make_shared<Queue>("r" + std::to_string(rank))),
      cache_limit_(std::max<int64_t>(1, cache_limit)) {}

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
  std::optional<NativeCall> call;
  if (tensors.size() == 1 && simple(tensors[0]) && !opts.sparseIndices.has_value()) {
    call = native_call(ALLREDUCE, tensors[0], at::Tensor(), {tensors[0]}, op_code(opts.reduceOp), -1, opts.timeout,
                       opts.asyncOp);
  }
  return dispatch(OpType::ALLREDUCE, "allreduce", call, "allreduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  std::optional<NativeCall> call;
  if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
    call = native_call(BROADCAST, tensors[0], at::Tensor(), {tensors[0]}, 0, opts.rootRank, opts.timeout,
                       opts.asyncOp);
  }
  return dispatch(OpType::BROADCAST, "broadcast", call, "broadcast", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  std::optional<NativeCall> call;
  if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
    call = native_call(REDUCE, tensors[0], at::Tensor(), {tensors[0]}, op_code(opts.reduceOp), opts.rootRank,
                       opts.timeout, opts.asyncOp);
  }
  return dispatch(OpType::REDUCE, "reduce", call, "reduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  std::optional<NativeCall> call;
  if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
      output.numel() == input.numel() * getSize()) {
    call = native_call(ALLGATHER, input, output, {output}, 0, -1, opts.timeout, opts.asyncOp);
  }
  return dispatch(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", call, "_allgather_base", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  std::optional<NativeCall> call;
  if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
      input.numel() == output.numel() * getSize()) {
    call = native_call(REDUCESCATTER, input, output, {output}, op_code(opts.reduceOp), -1, opts.timeout,
                       opts.asyncOp);
  }
  return dispatch(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", call, "_reduce_scatter_base", output, input,
                  opts);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& out_splits, std::vector<int64_t>& in_splits,
                                                      const c10d::AllToAllOptions& opts) {
  std::optional<NativeCall> call;
  if (out_splits.empty() && in_splits.empty() && simple(input) && simple(output) &&
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() && input.dim() > 0 &&
      input.size(0) % getSize() == 0 && output.size(0) % getSize() == 0) {
    call = native_call(ALLTOALL, input, output, {output}, 0, -1, opts.timeout, opts.asyncOp);
  }
  return dispatch(OpType::ALLTOALL_BASE, "all_to_all_single", call, "alltoall_base", output, input, out_splits,
                  in_splits, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  std::optional<NativeCall> call = native_call(BARRIER, at::Tensor(), at::Tensor(), {}, 0, -1, opts.timeout,
                                               opts.asyncOp);
  return dispatch(OpType::BARRIER, "barrier", call, "barrier", opts);
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

Backend::NativeCall Backend::native_call(int kind, const at::Tensor& input, const at::Tensor& output,
                                         std::vector<at::Tensor> results, int op, int64_t root, Ms timeout,
                                         bool async_op) const {
  int dtype = input.defined() ? static_cast<int>(input.scalar_type()) : -1;
  Key key{kind, dtype, op, input.defined() ? input.numel() : 0, output.defined() ? output.numel() : -1, root};
  return NativeCall{key, input, output, std::move(results), seconds_of(timeout), async_op};
}

std::optional<std::shared_ptr<Spec>> Backend::cached(const Key& key) {
  std::lock_guard<std::mutex> g(cache_m_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

void Backend::remember(const Key& key, const std::shared_ptr<Spec>& spec) {
  std::lock_guard<std::mutex> g(cache_m_);
  cache_[key] = spec;
}

void Backend::make_room() {
  std::lock_guard<std::mutex> g(cache_m_);
  if (static_cast<int64_t>(cache_.size()) < cache_limit_) return;
  for (auto& [key, spec] : cache_) {
    if (spec) retired_.emplace_back(spec->index, spec);
  }
  cache_.clear();  // shapes that keep changing: every signature is asked again, at most cache_limit_ kept
}

std::vector<int64_t> Backend::released() {
  std::lock_guard<std::mutex> g(cache_m_);
  std::vector<int64_t> out;
  size_t kept = 0;
  for (auto& entry : retired_) {
    if (entry.second.expired()) {
      out.push_back(entry.first);
    } else {
      retired_[kept++] = entry;
    }
  }
  retired_.resize(kept);
  return out;
}

std::vector<int64_t> Backend::cache_counts() {
  std::lock_guard<std::mutex> g(cache_m_);
  int64_t held = 0;
  for (auto& entry : retired_) held += entry.second.expired() ? 0 : 1;
  int64_t native = 0;
  for (const auto& [key, spec] : cache_) native += spec ? 1 : 0;
  return {static_cast<int64_t>(cache_.size()), native, held, inline_runs_.load()};
}

std::shared_ptr<Spec> Backend::ask(const NativeCall& call) {
  std::vector<int64_t> gone = released();
  py::gil_scoped_acquire gil;
  if (!gone.empty()) core_.attr("forget")(gone);  // the plans of Specs C++ no longer holds
  const at::Tensor& ref = call.input;
  py::object dt = ref.defined() ? py::reinterpret_borrow<py::object>(
                                      reinterpret_cast<PyObject*>(torch::getTHPDtype(ref.scalar_type())))
                                : py::none();
  const Key& k = call.key;
  py::object answer = core_.attr("prepare")(k.kind, k.in, k.out, dt, k.op, k.root, call.seconds);
  return answer.is_none() ? nullptr : answer.cast<std::shared_ptr<Spec>>();
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
                                               NativeCall call) {
  auto work = c10::make_intrusive<Work>(type, what, queue_);
  int64_t bytes = std::max(call.input.defined() ? call.input.nbytes() : 0,
                           call.output.defined() ? call.output.nbytes() : 0);
  auto job = [this, work, spec, call] {
    try {
      run_native(*spec, call, call.seconds, later_check(*spec));
      counts_->add(spec->label);
      work->finish(call.results);
    } catch (...) {
      work->fail(capture());
    }
  };
  // A small synchronous collective runs in the caller's thread once the queue ahead of it has drained: two
  // thread hand-offs (to the worker and back) are most of a small collective's time on a loaded host, and
  // the caller would wait for it anyway. The caller holds no GIL (torch's bindings release it), and no
  // callback can be chained yet, so the Work is simply complete when it is returned. An async_op=True call
  // (which must return at once, so that wait(timeout) holds), a caller holding the GIL, the worker itself and
  // a larger message go to the worker.
  if (!call.async_op && bytes <= inline_bytes_ && !PyGILState_Check() && queue_->begin_inline()) {
    ++inline_runs_;
    job();
    queue_->end_inline();
  } else {
    queue_->submit(std::move(job));
  }
  track(work);
  return work;
}

// The first call of a signature, on the worker in issue order (its preparation exchanges rows with every rank):
// Core.prepare answers once, with the policy's plan, its buffers and the checked arguments, and this call runs
// natively at once. A call issued before the answer finds it cached here and runs as a later call; a signature
// Python serves runs the Python body.
c10::intrusive_ptr<c10d::Work> Backend::first(OpType type, const char* what, NativeCall call, Body body) {
  auto work = c10::make_intrusive<Work>(type, what, queue_);
  queue_->submit([this, work, call, body] {
    try {
      auto started = Clock::now();
      std::shared_ptr<Spec> spec;
      std::shared_ptr<Check> check;
      if (auto hit = cached(call.key)) {
        spec = *hit;
        if (spec) check = later_check(*spec);
      } else {
        make_room();
        spec = ask(call);
        if (spec) check = std::move(spec->first_check);
        remember(call.key, spec);
      }
      if (!spec) {
        work->finish(body());
        return;
      }
      // The preparation's exchange counts against the call's time limit, as in runners.execution.runner.run.
      double spent = std::chrono::duration<double>(Clock::now() - started).count();
      run_native(*spec, call, std::max(call.seconds - spent, 0.0), check);
      counts_->add(spec->label);
      work->finish(call.results);
    } catch (...) {
      work->fail(capture());
    }
  });
  track(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> Backend::python(OpType type, const char* what, Body body) {
  auto work = c10::make_intrusive<Work>(type, what, queue_);
  queue_->submit([work, body] {
    try {
      work->finish(body());
    } catch (...) {
      work->fail(capture());
    }
  });
  track(work);
  return work;
}

// As runners.execution.runner's checked call of a signature it checked before: salted tags and the stall watch.
std::shared_ptr<Check> Backend::later_check(const Spec& sp) {
  if (!sp.checked) return nullptr;
  int64_t counter = next_call(inner_);
  std::vector<int64_t> row = sp.row;
  row.push_back(1);  // checked before
  int64_t salt = salt_of(row, counter, sp.shift);
  return Check::make(store_, counter, std::move(row), getRank(), getSize(), salt, stall_s_);
}

void Backend::run_native(const Spec& sp, const NativeCall& call, double seconds, const std::shared_ptr<Check>& check) {
  const at::Tensor& user_in = call.input;
  const at::Tensor& output = call.output;
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
                                               int64_t inline_bytes, int64_t cache_limit) {
  return c10::make_intrusive<Backend>(rank, size, std::move(core), inner, seconds, std::move(counts), native,
                                      std::move(store), stall_s, inline_bytes, cache_limit);
}

}  // namespace collsched
