// collsched's torch.distributed backend in C++: a c10d::Backend whose collectives return Work objects
// holding a c10::ivalue::Future that the backend's own C++ worker thread completes.
//
// Included by executor.cpp after the Plan class (one translation unit: one build, one cache entry).
//
// Every collective becomes a job on the group's one worker thread, a FIFO (collectives complete in issue
// order, async_op returns at once). A job is either
//   - native: a dense, contiguous CPU tensor of a signature (kind, sizes, dtype, op, root) for which the
//     Python policy has compiled a plan. The first call of a signature asks Python once (with the GIL:
//     runners.backend.cpp.Core.prepare) for the plan and its buffer layout, and the answer is cached; a
//     later call runs with no Python at all (buffers bound, plan run over the inner gloo group, AVG divided,
//     results copied back, the future completed), or
//   - python: everything else (other shapes and kinds, CUDA tensors, the checked first call of a signature):
//     the worker takes the GIL and runs the Python backend's own body for the call
//     (runners.backend.group.CollschedProcessGroup, made with an inline queue), so every feature of the Python
//     backend keeps working, in issue order.
// A native failure is turned into the Python executor's RunError / RunTimeout (naming step, transfer and
// peer) by Core.native_failure, and every failure surfaces through Work::wait() and the future.

#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace collsched_backend {

using c10d::OpType;
using Ms = std::chrono::milliseconds;

// What Python's prepare() answered for one signature.
struct Spec {
  bool native = false;
  std::shared_ptr<Plan> plan;
  int64_t s = 0, n = 0, c = 1, in_segs = 0, out_segs = 0, scratch = 0, budget_bytes = 0, op = 0, index = -1;
  bool in_copy = false, in_initial = true, out_copy = false, in_place = false, dataflow = true;
  bool divide = false, clone_input = false, barrier = false, check_first = false;
  std::string label;
  // The argument check after the first call (check.h; check_first false: COLLSCHED_CHECK=0, no salt, no
  // watch): this rank's metadata row (12 fields) and the bit position of the tags' salt.
  std::vector<int64_t> row;
  int64_t shift = 0;
};

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

// One worker thread running jobs in issue order.
class Queue {
 public:
  using Job = std::function<void()>;

  explicit Queue(std::string name) : name_(std::move(name)) {}

  void submit(Job job) {
    std::lock_guard<std::mutex> g(m_);
    TORCH_CHECK(!closed_, "collsched group ", name_, " has been shut down");
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { loop(); });
      worker_ = thread_.get_id();
    }
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }

  bool on_worker() const { return std::this_thread::get_id() == worker_; }

  // The caller may run a job itself, in its own thread, when nothing is queued or running (the order of
  // collectives is kept: a job submitted meanwhile waits until end_inline). True if it may.
  bool begin_inline() {
    std::lock_guard<std::mutex> g(m_);
    if (closed_ || busy_ || !jobs_.empty()) return false;
    busy_ = true;
    return true;
  }
  void end_inline() {
    {
      std::lock_guard<std::mutex> g(m_);
      busy_ = false;
    }
    cv_.notify_one();
  }

  // On the worker (a callback chained on a future waiting for a later collective): run queued jobs inline.
  void run_until(const std::function<bool()>& done) {
    while (!done()) {
      Job job;
      {
        std::lock_guard<std::mutex> g(m_);
        TORCH_CHECK(!jobs_.empty(), "collsched group ", name_,
                    ": a collective waits for itself (waited on inside its own callback)");
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  // Let queued jobs finish, then stop the thread (the caller must not hold the GIL: Python jobs need it).
  void close() {
    {
      std::lock_guard<std::mutex> g(m_);
      if (closed_) return;
      closed_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable() && !on_worker()) thread_.join();
    if (thread_.joinable()) thread_.detach();
  }

 private:
  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [this] { return !busy_ && (closed_ || !jobs_.empty()); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      }
      job();
      std::lock_guard<std::mutex> g(m_);
      busy_ = false;
    }
  }

  std::string name_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool closed_ = false;
  bool busy_ = false;  // a job is running: on the worker, or inline in a caller's thread
  std::thread thread_;
  std::thread::id worker_;
};

// Raise a Python exception of `type` from C++ (taking the GIL for it): pybind11 hands it to the caller as is.
[[noreturn]] inline void raise_python(PyObject* type, const std::string& text) {
  py::gil_scoped_acquire gil;
  PyErr_SetString(type, text.c_str());
  throw py::error_already_set();
}

// A Python exception raised by a job, kept so that every wait() can raise it again. (A kept
// py::error_already_set can be restored only once: a second wait() on the same Work would fail.)
class PythonError : public std::runtime_error {
 public:
  PythonError(const py::object& value, const std::string& text)
      : std::runtime_error(text), value_(value.inc_ref().ptr(), [](PyObject* o) {
          if (Py_IsInitialized()) {
            py::gil_scoped_acquire gil;
            Py_DECREF(o);
          }
        }) {}
  PyObject* value() const { return value_.get(); }

 private:
  std::shared_ptr<PyObject> value_;
};

// The exception in flight, with a Python one turned into a PythonError (call inside a catch block).
inline std::exception_ptr capture() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    py::gil_scoped_acquire gil;
    return std::make_exception_ptr(PythonError(e.value(), e.what()));
  } catch (...) {
    return std::current_exception();
  }
}

// The seed tutorial's WorkDummy, with a real future: completed (or failed) by the worker thread.
class Work : public c10d::Work {
 public:
  Work(OpType type, std::string what, std::shared_ptr<Queue> queue)
      : c10d::Work(-1, type),
        what_(std::move(what)),
        queue_(std::move(queue)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void finish(std::vector<at::Tensor> outputs) {
    {
      std::lock_guard<std::mutex> g(state_);
      outputs_ = outputs;
      done_ = true;
    }
    cv_.notify_all();
    future_->markCompleted(c10::IValue(std::move(outputs)));  // runs chained callbacks, on this thread
  }

  void fail(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> g(state_);
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
    future_->setError(error);
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> g(state_);
    return done_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> g(state_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> g(state_);
    return error_;
  }

  bool wait(Ms timeout = kNoTimeout) override {
    if (!isCompleted() && queue_->on_worker()) queue_->run_until([this] { return isCompleted(); });
    {
      std::unique_lock<std::mutex> g(state_);
      if (timeout == kNoTimeout || timeout.count() <= 0) {
        cv_.wait(g, [this] { return done_; });
      } else if (!cv_.wait_for(g, timeout, [this] { return done_; })) {
        g.unlock();
        raise_python(PyExc_TimeoutError,
                     "collsched " + what_ + " did not complete within " + std::to_string(timeout.count()) + " ms");
      }
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  void synchronize() override { wait(); }
  std::vector<at::Tensor> result() override {
    wait();
    return outputs_;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::string what_;
  std::shared_ptr<Queue> queue_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex state_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<at::Tensor> outputs_;
};

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

  ~Backend() override {
    shutdown();
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      core_ = py::object();
    } else {
      core_.release();  // the interpreter is gone: nothing to release the reference to
    }
  }

  const std::string getBackendName() const override { return "collsched"; }

  void shutdown() override {
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
  void abort() override { shutdown(); }

  // ------------------------------------------------------------------ collectives
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (tensors.size() == 1 && simple(tensors[0]) && !opts.sparseIndices.has_value()) {
      const at::Tensor& t = tensors[0];
      auto spec = lookup(ALLREDUCE, t, t.numel(), -1, op_code(opts.reduceOp), -1);
      if (spec) return native(OpType::ALLREDUCE, "allreduce", spec, t, at::Tensor(), {t}, opts.timeout);
    }
    return python(OpType::ALLREDUCE, "allreduce", "allreduce", tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
      const at::Tensor& t = tensors[0];
      auto spec = lookup(BROADCAST, t, t.numel(), -1, 0, opts.rootRank);
      if (spec) return native(OpType::BROADCAST, "broadcast", spec, t, at::Tensor(), {t}, opts.timeout);
    }
    return python(OpType::BROADCAST, "broadcast", "broadcast", tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    if (tensors.size() == 1 && simple(tensors[0]) && opts.rootTensor == 0 && valid_root(opts.rootRank)) {
      const at::Tensor& t = tensors[0];
      auto spec = lookup(REDUCE, t, t.numel(), -1, op_code(opts.reduceOp), opts.rootRank);
      if (spec) return native(OpType::REDUCE, "reduce", spec, t, at::Tensor(), {t}, opts.timeout);
    }
    return python(OpType::REDUCE, "reduce", "reduce", tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
        output.numel() == input.numel() * getSize()) {
      auto spec = lookup(ALLGATHER, input, input.numel(), output.numel(), 0, -1);
      if (spec) return native(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", spec, input, output, {output},
                              opts.timeout);
    }
    return python(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", "_allgather_base", output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    if (simple(input) && simple(output) && output.scalar_type() == input.scalar_type() &&
        input.numel() == output.numel() * getSize()) {
      auto spec = lookup(REDUCESCATTER, input, input.numel(), output.numel(), op_code(opts.reduceOp), -1);
      if (spec) return native(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", spec, input, output,
                              {output}, opts.timeout);
    }
    return python(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", "_reduce_scatter_base", output, input,
                  opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& opts) override {
    if (out_splits.empty() && in_splits.empty() && simple(input) && simple(output) &&
        output.scalar_type() == input.scalar_type() && input.numel() == output.numel() && input.dim() > 0 &&
        input.size(0) % getSize() == 0 && output.size(0) % getSize() == 0) {
      auto spec = lookup(ALLTOALL, input, input.numel(), output.numel(), 0, -1);
      if (spec) return native(OpType::ALLTOALL_BASE, "all_to_all_single", spec, input, output, {output},
                              opts.timeout);
    }
    return python(OpType::ALLTOALL_BASE, "all_to_all_single", "alltoall_base", output, input, out_splits, in_splits,
                  opts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    auto spec = lookup(BARRIER, at::Tensor(), 0, -1, 0, -1);
    if (spec) return native(OpType::BARRIER, "barrier", spec, at::Tensor(), at::Tensor(), {}, opts.timeout);
    return python(OpType::BARRIER, "barrier", "barrier", opts);
  }

  // The Python backend's bodies serve the rest, on the worker thread, in issue order.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    return python(OpType::_ALLREDUCE_SPARSE, "allreduce", "allreduce", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return python(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", "allreduce_coalesced", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return python(OpType::ALLGATHER, "allgather", "allgather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return python(OpType::ALLGATHER_COALESCED, "allgather_coalesced", "allgather_coalesced", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    return python(OpType::COALESCED, "all_gather_into_tensor_coalesced", "allgather_into_tensor_coalesced", outputs,
                  inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return python(OpType::GATHER, "gather", "gather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return python(OpType::SCATTER, "scatter", "scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return python(OpType::REDUCE_SCATTER, "reduce_scatter", "reduce_scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return python(OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced",
                  "reduce_scatter_tensor_coalesced", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return python(OpType::ALLTOALL, "all_to_all", "alltoall", outputs, inputs, opts);
  }

  // ------------------------------------------------------------------ point-to-point: handed through, at once
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    py::gil_scoped_acquire gil;
    return core_.attr("send")(tensors, dst, tag).cast<c10::intrusive_ptr<c10d::Work>>();
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    py::gil_scoped_acquire gil;
    return core_.attr("recv")(tensors, src, tag).cast<c10::intrusive_ptr<c10d::Work>>();
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    py::gil_scoped_acquire gil;
    return core_.attr("recv_anysource")(tensors, tag).cast<c10::intrusive_ptr<c10d::Work>>();
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    py::gil_scoped_acquire gil;
    core_.attr("monitored_barrier")(opts.timeout, wait_all_ranks);
  }

  // ------------------------------------------------------------------ coalescing manager
  void startCoalescing() override {
    std::lock_guard<std::mutex> g(coalescing_m_);
    coalescing_ = true;
    coalesced_.clear();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
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

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setTimeout(Ms timeout) override { seconds_ = static_cast<double>(timeout.count()) / 1000.0; }

  py::object core() const { return core_; }
  int64_t native_signatures() {
    std::lock_guard<std::mutex> g(cache_m_);
    int64_t k = 0;
    for (const auto& [key, spec] : cache_) k += spec ? 1 : 0;
    return k;
  }

 private:
  static bool simple(const at::Tensor& t) {
    return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.is_contiguous() &&
           !t.is_sparse() && t.numel() > 0;
  }
  bool valid_root(int64_t root) const { return root >= 0 && root < getSize(); }

  // runners.execution.arguments.OP_NAMES index of a c10d op; -1: not one the executor knows (Python raises its error).
  static int op_code(const c10d::ReduceOp& op) {
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

  // The cached answer for a signature (asking Python once on a miss); null: the Python path serves it.
  std::shared_ptr<Spec> lookup(int kind, const at::Tensor& ref, int64_t in, int64_t out, int op, int64_t root) {
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
      if (!answer.is_none()) spec = to_spec(answer);
    }
    std::lock_guard<std::mutex> g(cache_m_);
    if (cache_.size() >= 256) cache_.clear();  // a cheap bound: shapes that keep changing are rare
    cache_[key] = spec;
    // The argument check (COLLSCHED_CHECK, on by default): the first call of a signature runs the Python
    // path, whose cross-rank check compares every rank's arguments; later calls of the signature run
    // natively, checked in band (salted tags and the stall watch of check.h).
    return spec && spec->check_first ? nullptr : spec;
  }

  static std::shared_ptr<Spec> to_spec(const py::object& a) {
    auto t = a.cast<py::tuple>();
    auto s = std::make_shared<Spec>();
    s->native = true;
    s->plan = t[0].cast<std::shared_ptr<Plan>>();
    s->s = t[1].cast<int64_t>();
    s->n = t[2].cast<int64_t>();
    s->c = t[3].cast<int64_t>();
    s->in_segs = t[4].cast<int64_t>();
    s->in_copy = t[5].cast<bool>();
    s->in_initial = t[6].cast<bool>();
    s->out_segs = t[7].cast<int64_t>();
    s->out_copy = t[8].cast<bool>();
    s->in_place = t[9].cast<bool>();
    s->scratch = t[10].cast<int64_t>();
    s->budget_bytes = t[11].cast<int64_t>();
    s->op = t[12].cast<int64_t>();
    s->dataflow = t[13].cast<bool>();
    s->divide = t[14].cast<bool>();
    s->clone_input = t[15].cast<bool>();
    s->barrier = t[16].cast<bool>();
    s->label = t[17].cast<std::string>();
    s->index = t[18].cast<int64_t>();
    s->check_first = t[19].cast<bool>();
    s->row = t[20].cast<std::vector<int64_t>>();
    s->shift = t[21].cast<int64_t>();
    return s;
  }

  double seconds_of(Ms timeout) const {
    return timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : seconds_;
  }

  void track(const c10::intrusive_ptr<Work>& work) {
    std::lock_guard<std::mutex> g(coalescing_m_);
    if (coalescing_) coalesced_.push_back(work);
    ++seq_;
  }

  // Buffers.bind of runners.execution.buffers: the caller's tensor, or a padded copy to copy back afterwards.
  static at::Tensor bind(const Spec& sp, const at::Tensor& user, int64_t segs, bool writable, bool copy, bool initial,
                         std::vector<std::pair<at::Tensor, at::Tensor>>& back) {
    at::Tensor flat = user.view(-1);
    if (!copy) return flat;
    at::Tensor work = at::zeros({segs * sp.c * sp.s}, user.options());  // padding is reduced too: finite
    at::Tensor real = work.view({segs, -1}).narrow(1, 0, sp.n);
    if (initial) real.copy_(flat.view({segs, sp.n}));
    if (writable) back.emplace_back(flat.view({segs, sp.n}), real);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> native(OpType type, const char* what, std::shared_ptr<Spec> spec, at::Tensor input,
                                        at::Tensor output, std::vector<at::Tensor> results, Ms timeout) {
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

  void run_native(const Spec& sp, const at::Tensor& user_in, const at::Tensor& output, double seconds) {
    std::vector<std::pair<at::Tensor, at::Tensor>> back;
    at::Tensor in, out, scratch;
    if (sp.barrier) {
      in = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
    } else {
      at::Tensor user = sp.clone_input ? user_in.clone() : user_in;
      if (sp.in_segs > 0) in = bind(sp, user, sp.in_segs, sp.in_place, sp.in_copy, sp.in_initial, back);
      if (sp.in_place) {
        out = in.defined() ? in : at::empty({0}, user.options());
      } else if (sp.out_segs > 0) {
        out = bind(sp, output, sp.out_segs, true, sp.out_copy, false, back);
      }
    }
    const at::Tensor& ref = in.defined() ? in : out;
    if (sp.scratch > 0) scratch = at::empty({sp.scratch}, ref.options());
    if (arena_.numel() < sp.budget_bytes) arena_ = at::empty({sp.budget_bytes}, at::TensorOptions().dtype(at::kByte));
    std::vector<at::Tensor> bufs{in.defined() ? in : ref, out.defined() ? out : ref, scratch.defined() ? scratch : ref};
    std::shared_ptr<Check> check;
    if (sp.check_first) {  // as runners.execution.runner.run's checked call of a signature it checked before
      int64_t counter = collsched_check::next_call(inner_);
      std::vector<int64_t> row = sp.row;
      row.push_back(1);  // checked before
      int64_t salt = collsched_check::salt_of(row, counter, sp.shift);
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

  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> python(OpType type, const char* what, const char* method, Args... args) {
    auto work = c10::make_intrusive<Work>(type, what, queue_);
    std::string name = method;
    queue_->submit([this, work, name, args...] {
      try {
        std::vector<at::Tensor> outputs;
        {
          py::gil_scoped_acquire gil;
          py::object value = core_.attr("serve")(name, py::make_tuple(args...));
          outputs = value.cast<std::vector<at::Tensor>>();
        }
        work->finish(std::move(outputs));
      } catch (...) {
        work->fail(capture());
      }
    });
    track(work);
    return work;
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
  at::Tensor arena_;  // the staging buffer of this group's native runs, kept between them (the worker's only)
  std::mutex coalescing_m_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<Work>> coalesced_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> closed_{false};
};

// What torch's creator returns: a c10d::Backend (runners.backend.cpp.create).
inline c10::intrusive_ptr<c10d::Backend> make_backend(int rank, int size, py::object core,
                                                      const c10::intrusive_ptr<c10d::ProcessGroup>& inner,
                                                      double seconds, std::shared_ptr<Counts> counts, bool native,
                                                      c10::intrusive_ptr<c10d::Store> store, double stall_s,
                                                      int64_t inline_bytes) {
  return c10::make_intrusive<Backend>(rank, size, std::move(core), inner, seconds, std::move(counts), native,
                                      std::move(store), stall_s, inline_bytes);
}

inline void bind(py::module_& m) {
  // A job's Python exception reaches Python as itself, at every wait() (torch's Work.wait binding rethrows).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PythonError& e) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.value())), e.value());
    }
  });
  py::class_<Counts, std::shared_ptr<Counts>>(m, "Counts").def(py::init<>()).def("items", &Counts::items);
  m.def("make_backend", &make_backend, py::arg("rank"), py::arg("size"), py::arg("core"), py::arg("inner"),
        py::arg("seconds"), py::arg("counts"), py::arg("native"), py::arg("store"), py::arg("stall_s"),
        py::arg("inline_bytes"));
  m.def("core_of", [](const c10::intrusive_ptr<c10d::Backend>& b) -> py::object {
    auto* ours = dynamic_cast<Backend*>(b.get());
    return ours ? ours->core() : py::none();
  });
  m.def("native_signatures", [](const c10::intrusive_ptr<c10d::Backend>& b) -> int64_t {
    auto* ours = dynamic_cast<Backend*>(b.get());
    return ours ? ours->native_signatures() : -1;
  });
}

}  // namespace collsched_backend
