// The Work objects of collsched's C++ backend (backend.h) and the one worker thread that completes them.
//
// Work is the seed tutorial's WorkDummy with a real future: a c10::ivalue::Future that the group's worker
// thread (Queue) completes, or fails with the job's exception. A Python exception raised by a job is kept as a
// PythonError so that every wait() raises it again as itself (bindings.cpp registers the translator).

#pragma once

#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace collsched {

namespace py = pybind11;
using Ms = std::chrono::milliseconds;

// One worker thread running jobs in issue order.
class Queue {
 public:
  using Job = std::function<void()>;

  explicit Queue(std::string name) : name_(std::move(name)) {}

  void submit(Job job);

  bool on_worker() const { return std::this_thread::get_id() == worker_; }

  // The caller runs a job itself, in its own thread (a synchronous collective): it waits until nothing is
  // queued or running, then holds the queue (the order of collectives is kept: a job submitted meanwhile waits
  // until end_inline). False (run it on the worker instead) on the worker itself or once closed.
  bool begin_inline();
  void end_inline();

  // On the worker (a callback chained on a future waiting for a later collective): run queued jobs inline until
  // `done`; false when `deadline` passed first (checked between jobs: a job running is bounded by its own
  // collective's time limit).
  bool run_until(const std::function<bool()>& done,
                 std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

  // Let queued jobs finish, then stop the thread (the caller must not hold the GIL: Python jobs need it).
  void close();

 private:
  void loop();

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
[[noreturn]] void raise_python(PyObject* type, const std::string& text);

// A Python exception raised by a job, kept so that every wait() can raise it again. (A kept
// py::error_already_set can be restored only once: a second wait() on the same Work would fail.)
class PythonError : public std::runtime_error {
 public:
  PythonError(const py::object& value, const std::string& text);
  PyObject* value() const { return value_.get(); }

 private:
  std::shared_ptr<PyObject> value_;
};

// The exception in flight, with a Python one turned into a PythonError (call inside a catch block).
std::exception_ptr capture();

class Work : public c10d::Work {
 public:
  Work(c10d::OpType type, std::string what, std::shared_ptr<Queue> queue);

  void finish(std::vector<at::Tensor> outputs);
  void fail(std::exception_ptr error);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(Ms timeout = kNoTimeout) override;
  void synchronize() override { wait(); }
  std::vector<at::Tensor> result() override;
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

}  // namespace collsched
