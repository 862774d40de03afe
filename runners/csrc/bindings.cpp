// The extension's Python module (collsched_native, built by runners/execution/native.py): the only
// PYBIND11_MODULE. What each binding runs lives in its own file: plan.h / executor.h (the executor), check.h (the
// in-band check), work.h and backend.h (the C++ backend).

#include "backend.h"
#include "check.h"
#include "executor.h"
#include "plan.h"
#include "work.h"

namespace py = pybind11;
using collsched::Backend;
using collsched::Check;
using collsched::Counts;
using collsched::Plan;
using collsched::Spec;

namespace {

void bind_executor(py::module_& m) {
  py::class_<Plan, std::shared_ptr<Plan>>(m, "Plan")
      .def(py::init<const std::vector<std::vector<int64_t>>&, std::vector<std::vector<int64_t>>,
                    std::vector<std::vector<int64_t>>, std::vector<std::vector<int64_t>>,
                    std::vector<std::vector<int64_t>>, std::vector<int64_t>, int64_t>())
      .def("__len__", &Plan::size)
      .def("run", &Plan::run, py::arg("bufs"), py::arg("s"), py::arg("group"), py::arg("arena"), py::arg("op"),
           py::arg("seconds"), py::arg("dataflow"), py::arg("check") = nullptr,
           py::call_guard<py::gil_scoped_release>());
  m.def("exchange_rows", &collsched::exchange_rows, py::arg("mine"), py::arg("rows"), py::arg("rank"),
        py::arg("group"), py::arg("tag"), py::arg("seconds"), py::arg("check") = nullptr,
        py::call_guard<py::gil_scoped_release>());
  m.def("wait_watched", &collsched::wait_watched, py::arg("check"), py::arg("work"), py::arg("seconds"),
        py::call_guard<py::gil_scoped_release>());
  m.def("transport_floor", &collsched::transport_floor, py::arg("rows"), py::arg("group"), py::arg("repeats"),
        py::call_guard<py::gil_scoped_release>());
}

// The in-band check (check.h): one run's watch, its salt and the group's call counter.
void bind_check(py::module_& m) {
  py::class_<Check, std::shared_ptr<Check>>(m, "Check")
      .def(py::init(&Check::make), py::arg("store"), py::arg("counter"), py::arg("row"), py::arg("rank"), py::arg("p"),
           py::arg("salt"), py::arg("stall_s"))
      .def_readonly("salt", &Check::salt)
      .def("note_failure", &Check::note_failure, py::arg("text"), py::call_guard<py::gil_scoped_release>())
      .def("blame", &Check::blame, py::call_guard<py::gil_scoped_release>())
      .def("note_of", &Check::note_of, py::arg("rank"), py::arg("seconds") = 0.0,
           py::call_guard<py::gil_scoped_release>())
      .def_readonly("stall_s", &Check::stall_s)
      .def("forget", &Check::forget, py::call_guard<py::gil_scoped_release>());
  m.def("salt_of", &collsched::salt_of, py::arg("row"), py::arg("counter"), py::arg("shift"));
  m.def("next_call", &collsched::next_call, py::arg("group"));
}

void bind_backend(py::module_& m) {
  // A job's Python exception reaches Python as itself, at every wait() (torch's Work.wait binding rethrows).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const collsched::PythonError& e) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.value())), e.value());
    }
  });
  py::class_<Counts, std::shared_ptr<Counts>>(m, "Counts").def(py::init<>()).def("items", &Counts::items);
  // What Core.prepare answers, built with every field named (backend.h's Spec), read back by name.
  py::class_<Spec, std::shared_ptr<Spec>> spec(m, "Spec");
  spec.def(py::init(&Spec::from_kwargs));
#define COLLSCHED_READ(type, name) spec.def_readonly(#name, &Spec::name);
  COLLSCHED_SPEC_FIELDS(COLLSCHED_READ)
#undef COLLSCHED_READ
  m.def("make_backend", &collsched::make_backend, py::arg("rank"), py::arg("size"), py::arg("core"), py::arg("inner"),
        py::arg("seconds"), py::arg("counts"), py::arg("native"), py::arg("store"), py::arg("stall_s"),
        py::arg("inline_bytes"), py::arg("cache_limit"));
  m.def("core_of", [](const c10::intrusive_ptr<c10d::Backend>& b) -> py::object {
    auto* ours = dynamic_cast<Backend*>(b.get());
    return ours ? ours->core() : py::none();
  });
  m.def("native_signatures", [](const c10::intrusive_ptr<c10d::Backend>& b) -> int64_t {
    auto* ours = dynamic_cast<Backend*>(b.get());
    return ours ? ours->native_signatures() : -1;
  });
  m.def("cache_counts", [](const c10::intrusive_ptr<c10d::Backend>& b) -> std::vector<int64_t> {
    auto* ours = dynamic_cast<Backend*>(b.get());
    return ours ? ours->cache_counts() : std::vector<int64_t>{};
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "collsched's native executor and C++ backend (runners/csrc)";
  bind_executor(m);
  bind_check(m);
  bind_backend(m);
}
