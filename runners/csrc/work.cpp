// Work and its worker thread (work.h).

#include "work.h"

namespace collsched {

// ------------------------------------------------------------------ Queue

void Queue::submit(Job job) {
  std::lock_guard<std::mutex> g(m_);
  TORCH_CHECK(!closed_, "collsched group ", name_, " has been shut down");
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { loop(); });
    worker_ = thread_.get_id();
  }
  jobs_.push_back(std::move(job));
  cv_.notify_all();  // the worker, and callers waiting to run inline (they wait for the queue to drain)
}

bool Queue::begin_inline() {
  if (on_worker()) return false;  // the worker runs it (Work::wait runs queued jobs there)
  std::unique_lock<std::mutex> g(m_);
  cv_.wait(g, [this] { return closed_ || (!busy_ && jobs_.empty()); });
  if (closed_) return false;
  busy_ = true;
  return true;
}

void Queue::end_inline() {
  {
    std::lock_guard<std::mutex> g(m_);
    busy_ = false;
  }
  cv_.notify_all();
}

bool Queue::run_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
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
  return true;
}

void Queue::close() {
  {
    std::lock_guard<std::mutex> g(m_);
    if (closed_) return;
    closed_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable() && !on_worker()) thread_.join();
  if (thread_.joinable()) thread_.detach();
}

void Queue::loop() {
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
    {
      std::lock_guard<std::mutex> g(m_);
      busy_ = false;
    }
    cv_.notify_all();  // a caller may be waiting to run a synchronous collective inline
  }
}

// ------------------------------------------------------------------ errors

void raise_python(PyObject* type, const std::string& text) {
  py::gil_scoped_acquire gil;
  PyErr_SetString(type, text.c_str());
  throw py::error_already_set();
}

PythonError::PythonError(const py::object& value, const std::string& text)
    : std::runtime_error(text), value_(value.inc_ref().ptr(), [](PyObject* o) {
        if (Py_IsInitialized()) {
          py::gil_scoped_acquire gil;
          Py_DECREF(o);
        }
      }) {}

std::exception_ptr capture() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    py::gil_scoped_acquire gil;
    return std::make_exception_ptr(PythonError(e.value(), e.what()));
  } catch (...) {
    return std::current_exception();
  }
}

// ------------------------------------------------------------------ Work

Work::Work(c10d::OpType type, std::string what, std::shared_ptr<Queue> queue)
    : c10d::Work(-1, type),
      what_(std::move(what)),
      queue_(std::move(queue)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void Work::finish(std::vector<at::Tensor> outputs) {
  {
    std::lock_guard<std::mutex> g(state_);
    outputs_ = outputs;
    done_ = true;
  }
  cv_.notify_all();
  future_->markCompleted(c10::IValue(std::move(outputs)));  // runs chained callbacks, on this thread
}

void Work::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> g(state_);
    error_ = error;
    done_ = true;
  }
  cv_.notify_all();
  future_->setError(error);
}

bool Work::isCompleted() {
  std::lock_guard<std::mutex> g(state_);
  return done_;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> g(state_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> g(state_);
  return error_;
}

bool Work::wait(Ms timeout) {
  bool limited = timeout != kNoTimeout && timeout.count() > 0;
  auto deadline = limited ? std::chrono::steady_clock::now() + timeout : std::chrono::steady_clock::time_point::max();
  if (!isCompleted() && queue_->on_worker() && !queue_->run_until([this] { return isCompleted(); }, deadline)) {
    raise_python(PyExc_TimeoutError, "collsched " + what_ + " did not complete within " +
                                         std::to_string(timeout.count()) + " ms");
  }
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

std::vector<at::Tensor> Work::result() {
  wait();
  return outputs_;
}

}  // namespace collsched
