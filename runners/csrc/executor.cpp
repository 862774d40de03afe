// collsched's native executor: runs one rank's compiled plan (plan.h) over the
// inner c10d backend with no Python and without the GIL.
//
// The two engines are those of runners/execution/executors.py, step for step: "grouped" (one group of sends and
// receives per step; on a backend that coalesces, nccl, one startCoalescing..endCoalescing group) and
// "dataflow" (gloo only: each transfer posted as its dependencies complete, on its own tag). Staged
// receives on CPU are carved from the staging buffer the caller lends (first fit, as runners.execution.staging's
// Carver), within the plan's budget, so the memory bound is the Python executor's.
//
// Errors are not raised here: run() returns (status, item, text), and the Python wrapper turns a failure
// into the same RunError / RunTimeout that the Python executor raises (naming step, transfer and peer).
// CUDA: nothing below includes a CUDA header; for CUDA buffers the same code posts each step as one
// coalesced group on the backend (ProcessGroupNCCL) and waits on its Work, which makes the current stream
// wait (the host does not block). That path compiles on every torch build; it has only run on CPU.

#include "executor.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

namespace collsched {

namespace {

// A run's failure: the item it concerns and the backend's text.
struct Failure {
  int status;
  int64_t item;
  std::string text;
};

// First-fit chunk slots of the lent staging buffer (runners.execution.staging.Carver in C++).
class Carver {
 public:
  Carver(at::Tensor buffer, int64_t unit, int64_t units, at::ScalarType dtype)
      : buffer_(std::move(buffer)), unit_(unit), dtype_(dtype) {
    if (units > 0) free_.push_back({0, units});
  }

  std::pair<at::Tensor, int64_t> take(int64_t count) {
    for (size_t k = 0; k < free_.size(); ++k) {
      auto [start, length] = free_[k];
      if (length >= count) {
        if (length == count) {
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          free_[k] = {start + count, length - count};
        }
        return {buffer_.narrow(0, start * unit_, count * unit_).view(dtype_), start};
      }
    }
    // Fragmented: fresh memory (correct, just not reused).
    return {at::empty({count * unit_}, buffer_.options()).view(dtype_), -1};
  }

  void give(int64_t start, int64_t count) {
    if (start < 0) return;
    size_t k = 0;
    while (k < free_.size() && free_[k].first < start) ++k;
    free_.insert(free_.begin() + static_cast<std::ptrdiff_t>(k), {start, count});
    if (k + 1 < free_.size() && start + count == free_[k + 1].first) {
      free_[k].second += free_[k + 1].second;
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(k + 1));
    }
    if (k > 0 && free_[k - 1].first + free_[k - 1].second == start) {
      free_[k - 1].second += free_[k].second;
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

 private:
  at::Tensor buffer_;
  int64_t unit_;
  at::ScalarType dtype_;
  std::vector<std::pair<int64_t, int64_t>> free_;
};

// What the watchdog found for a run (under check->m): a mismatch or a peer that failed ends the run.
void found(const Check& check, int64_t item) {
  if (check.mismatch) throw Failure{MISMATCH, item, check.seen};
  if (check.peer_failed) throw Failure{PEER_FAILED, item, check.failed};
}

// work->wait(left) under a run's stall watch: a mismatch the watchdog found (now or before this wait) ends the
// run with MISMATCH and the rows it saw, a peer's note that it failed with PEER_FAILED; other failures as
// Engine::fail.
void watched_wait(const std::shared_ptr<Check>& check, const c10::intrusive_ptr<c10d::Work>& work,
                  std::chrono::milliseconds left, int64_t item) {
  bool watching = check && check->store;
  if (watching) {
    std::lock_guard<std::mutex> g(check->m);
    found(*check, item);
    check->waiting = work;
    check->since = Clock::now();
  }
  bool done = true;
  std::string error;
  try {
    done = work->wait(left);
  } catch (const std::exception& e) {
    error = e.what();
    auto nl = error.find('\n');
    if (nl != std::string::npos) error = error.substr(0, nl);
    if (error.empty()) error = "failed";
  }
  if (watching) {
    std::lock_guard<std::mutex> g(check->m);
    check->waiting.reset();
    found(*check, item);
  }
  if (!error.empty()) throw Failure{FAILED, item, error};
  if (!done) throw Failure{FAILED, item, "aborted"};
}

}  // namespace

std::tuple<int, std::string> wait_watched(const std::shared_ptr<Check>& check,
                                          const c10::intrusive_ptr<c10d::Work>& work, double seconds) {
  Watched watched(check);  // the watchdog looks at this wait while it lasts
  try {
    watched_wait(check, work, std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1e3))),
                 -1);
  } catch (const Failure& f) {
    return {f.status, f.text};
  }
  return {OK, ""};
}

namespace {

// What a failed run tells its peers (check.h's note) and, when it timed out, what the stall watch saw.
Outcome noted(const Plan& plan, const std::shared_ptr<Check>& check, const Failure& f, bool timed_out) {
  if (!check || !check->store || f.status == MISMATCH) return {f.status, f.item, f.text};
  std::string text = f.text;
  std::string what = text;
  if (f.item >= 0 && f.item < plan.size()) {
    const Item& it = plan.items()[static_cast<size_t>(f.item)];
    what = "step " + std::to_string(it.step) + ": " + (it.role == SEND ? "send to" : "receive from") +
           " peer rank " + std::to_string(it.peer) + ": " + text;
    std::string theirs = f.status == FAILED && !timed_out ? check->note_of(it.peer, check->stall_s) : "";
    if (!theirs.empty()) text += " (rank " + std::to_string(it.peer) + " had failed first: " + theirs + ")";
  }
  if (f.status == PEER_FAILED) {
    auto colon = text.find(':');
    what = "abandoned: rank " + text.substr(0, colon) + " had failed first: " + text.substr(colon + 1);
  }
  if (timed_out) text += check->blame();
  check->note_failure(what);
  return {f.status, f.item, text};
}

// One run of a plan: the two engines of runners/execution/executors.py.
struct Engine {
  const Plan& plan;
  std::vector<at::Tensor> bufs;
  int64_t s;
  c10::intrusive_ptr<c10d::Backend> backend;
  at::Tensor arena;
  int64_t op;
  Clock::time_point deadline;
  at::ScalarType dtype;
  bool cuda;
  std::shared_ptr<Check> check;  // null: an unchecked run (no salt, no watch)
  int64_t salt = 0;

  Engine(const Plan& p, const std::vector<at::Tensor>& b, int64_t s_, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
         const at::Tensor& arena_, int64_t op_, double seconds, std::shared_ptr<Check> check_)
      : plan(p), bufs(b), s(s_), arena(arena_), op(op_), check(std::move(check_)) {
    if (check) salt = check->salt;
    const at::Tensor* ref = nullptr;
    for (const auto& t : bufs) {
      if (t.defined()) {
        ref = &t;
        break;
      }
    }
    TORCH_CHECK(ref != nullptr, "collsched native executor: no buffer");
    dtype = ref->scalar_type();
    cuda = ref->is_cuda();
    backend = pg->getBackend(ref->device().type());
    deadline = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  }

  at::Tensor slot(int64_t buf, int64_t index, int64_t count) const {
    return bufs[static_cast<size_t>(buf)].narrow(0, index * s, count * s);
  }
  at::Tensor src(const Item& it) const { return slot(it.src_buf, it.src_index, it.count); }
  at::Tensor dst(const Item& it) const { return slot(it.dst_buf, it.dst_index, it.count); }

  static at::Tensor bytes(const at::Tensor& t) {
    // Messages travel as bytes: every dtype moves the same way on every backend.
    return t.scalar_type() == at::kByte ? t : t.view(at::kByte);
  }

  [[noreturn]] static void fail(int64_t i, const std::exception& e) {
    std::string text = e.what();
    auto nl = text.find('\n');
    if (nl != std::string::npos) text = text.substr(0, nl);
    throw Failure{FAILED, i, text};
  }

  c10::intrusive_ptr<c10d::Work> isend(int64_t i, const at::Tensor& t) {
    std::vector<at::Tensor> v{bytes(t)};
    try {
      return backend->send(v, static_cast<int>(plan.items()[i].peer), static_cast<int>(plan.items()[i].tag | salt));
    } catch (const std::exception& e) {  // posting to a pair whose peer is gone fails at once
      fail(i, e);
    }
  }

  c10::intrusive_ptr<c10d::Work> irecv(int64_t i, const at::Tensor& into) {
    std::vector<at::Tensor> v{bytes(into)};
    try {
      return backend->recv(v, static_cast<int>(plan.items()[i].peer), static_cast<int>(plan.items()[i].tag | salt));
    } catch (const std::exception& e) {
      fail(i, e);
    }
  }

  void wait(int64_t i, const c10::intrusive_ptr<c10d::Work>& work) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw Failure{TIMED_OUT, i, "timed out"};
    watched_wait(check, work, left, i);
  }

  void combine(at::Tensor d, const at::Tensor& data) const {
    switch (op) {
      case TOKEN: return;  // a barrier token carries no data: receiving it is the whole point
      case PRODUCT: d.mul_(data); return;
      case MIN: at::minimum_out(d, d, data); return;
      case MAX: at::maximum_out(d, d, data); return;
      case BAND: d.bitwise_and_(data); return;
      case BOR: d.bitwise_or_(data); return;
      case BXOR: d.bitwise_xor_(data); return;
      default: d.add_(data); return;  // SUM, AVG (divided afterwards) and unnamed ops
    }
  }

  void apply(const Item& it, const at::Tensor& data) const {
    if (it.reduce) {
      combine(dst(it), data);
    } else {
      dst(it).copy_(data);
    }
  }

  void local(const Item& it) const {
    at::Tensor from = src(it);
    if (it.src_buf == it.dst_buf && std::abs(it.src_index - it.dst_index) < it.count) {
      from = from.clone();  // overlapping ranges of one buffer
    }
    apply(it, from);
  }

  int64_t unit() const { return s * c10::elementSize(dtype); }

  // ------------------------------------------------------------------ grouped
  void grouped() {
    const auto& items = plan.items();
    const int64_t n = static_cast<int64_t>(items.size());
    const bool batched = cuda && backend->supportsCoalescing();
    std::unique_ptr<Carver> carver;
    if (!cuda && plan.budget() > 0) {
      carver = std::make_unique<Carver>(arena, unit(), plan.budget(), dtype);
    }
    int64_t i = 0;
    while (i < n) {
      int64_t j = i;
      while (j < n && items[j].step == items[i].step) ++j;
      std::vector<std::pair<int64_t, at::Tensor>> ops;
      std::map<int64_t, std::pair<at::Tensor, int64_t>> held;  // item -> (data, carver slot)
      std::vector<int64_t> later;  // unstaged locals: their destination is read by nothing in this step
      for (int64_t k = i; k < j; ++k) {
        const Item& it = items[k];
        if (it.role == SEND) {
          ops.emplace_back(k, src(it));
        } else if (it.role == RECV) {
          if (it.staged) {
            std::pair<at::Tensor, int64_t> h;
            if (carver) {
              h = carver->take(it.count);
            } else {
              h = {at::empty({it.count * s}, bufs_options()), -1};
            }
            held[k] = h;
            ops.emplace_back(k, h.first);
          } else {
            ops.emplace_back(k, dst(it));
          }
        } else if (it.staged) {
          held[k] = {src(it).clone(), -1};  // snapshot before any write of the step lands
        } else {
          later.push_back(k);
        }
      }
      std::vector<std::pair<int64_t, c10::intrusive_ptr<c10d::Work>>> works;
      if (batched && !ops.empty()) {
        try {
          backend->startCoalescing();
        } catch (const std::exception& e) {
          fail(ops[0].first, e);
        }
        for (auto& [k, t] : ops) {
          if (items[k].role == SEND) {
            isend(k, t);
          } else {
            irecv(k, t);
          }
        }
        c10::intrusive_ptr<c10d::Work> w;
        try {
          w = backend->endCoalescing();
        } catch (const std::exception& e) {
          fail(ops[0].first, e);
        }
        works.emplace_back(ops[0].first, w);
      } else {
        for (auto& [k, t] : ops) {
          works.emplace_back(k, items[k].role == SEND ? isend(k, t) : irecv(k, t));
        }
      }
      for (int64_t k : later) local(items[k]);
      for (auto& [k, w] : works) {
        if (cuda) {
          try {
            w->wait();  // the current stream waits; the host does not
          } catch (const std::exception& e) {
            fail(k, e);
          }
        } else {
          wait(k, w);
        }
      }
      for (auto& [k, h] : held) {  // std::map: program order
        apply(items[k], h.first);
        if (carver && items[k].role == RECV) carver->give(h.second, items[k].count);
      }
      i = j;
    }
  }

  at::TensorOptions bufs_options() const {
    for (const auto& t : bufs) {
      if (t.defined()) return t.options();
    }
    return at::TensorOptions().dtype(dtype);
  }

  // ------------------------------------------------------------------ dataflow (gloo)
  void dataflow() {
    const auto& items = plan.items();
    const int64_t n = static_cast<int64_t>(items.size());
    int64_t budget = plan.budget();
    std::vector<int64_t> deps_left(plan.ndeps()), after_left(plan.nafter());
    std::vector<char> arrived(static_cast<size_t>(n), 0);
    std::map<int64_t, c10::intrusive_ptr<c10d::Work>> works;  // ordered: the earliest is begin()
    std::map<int64_t, at::Tensor> held;  // staging buffers and local snapshots
    std::map<int64_t, int64_t> slots;    // carver slot of each staged receive's buffer
    Carver carver(arena.defined() ? arena : at::empty({0}, bufs_options().dtype(at::kByte)), unit(),
                  plan.budget(), dtype);
    const auto& staged = plan.staged_recvs();
    size_t next_staged = 0;
    int64_t done = 0;
    enum Event : int { DEPS = 0, APPLY = 1, READ = 2, COMPLETE = 3 };
    std::vector<std::pair<int, int64_t>> todo;  // an explicit queue: chains of local transfers can be long

    auto post_staged = [&]() {
      while (next_staged < staged.size()) {
        int64_t i = staged[next_staged];
        int64_t count = items[i].count;
        if (count > budget) return;
        budget -= count;
        auto [t, slot_] = carver.take(count);
        held[i] = t;
        slots[i] = slot_;
        works[i] = irecv(i, t);
        ++next_staged;
      }
    };

    // The ready items are taken (todo is a stack) receives first, then sends, then local transfers, each
    // in program order: a receive posted early lets gloo's pair tell its peer at once, so the matching
    // send goes out without waiting for that word (gloo's own collectives post receives first too), and
    // local copies overlap the messages in flight.
    for (int role : {LOCAL, SEND, RECV}) {
      for (int64_t i = n - 1; i >= 0; --i) {
        if (deps_left[i] == 0 && items[i].role == role) todo.emplace_back(DEPS, i);
      }
    }
    post_staged();
    while (done < n) {
      while (!todo.empty()) {
        auto [ev, i] = todo.back();
        todo.pop_back();
        const Item& it = items[i];
        if (ev == DEPS) {
          if (it.role == SEND) {
            works[i] = isend(i, src(it));
          } else if (it.role == RECV) {
            if (it.staged) {
              todo.emplace_back(APPLY, i);
            } else {
              works[i] = irecv(i, dst(it));
            }
          } else if (it.staged) {
            held[i] = src(it).clone();
            arrived[i] = 1;
            todo.emplace_back(APPLY, i);
            todo.emplace_back(READ, i);
          } else {
            local(it);
            todo.emplace_back(COMPLETE, i);
            todo.emplace_back(READ, i);
          }
        } else if (ev == APPLY) {
          if (arrived[i] && deps_left[i] == 0 && after_left[i] == 0) {
            at::Tensor data = held[i];
            held.erase(i);
            apply(it, data);
            if (it.role == RECV) {
              carver.give(slots[i], it.count);
              slots.erase(i);
              budget += it.count;
              post_staged();
            }
            todo.emplace_back(COMPLETE, i);
          }
        } else if (ev == READ) {
          for (int64_t k : plan.readers()[i]) {
            if (--after_left[k] == 0) todo.emplace_back(APPLY, k);
          }
        } else {
          ++done;
          for (int64_t k : plan.dependents()[i]) {
            if (--deps_left[k] == 0) todo.emplace_back(DEPS, k);
          }
        }
      }
      if (done == n) break;
      if (works.empty()) {
        throw Failure{INTERNAL, -1, std::to_string(n - done) +
                                        " transfers cannot start (no operation outstanding)"};
      }
      // Block on the earliest outstanding operation, then take every other completed one (waiting on
      // anything but the earliest can deadlock).
      int64_t first = works.begin()->first;
      wait(first, works.begin()->second);
      std::vector<int64_t> finished;
      for (auto& [i, w] : works) {
        if (i == first || w->isCompleted()) finished.push_back(i);
      }
      for (int64_t i : finished) {
        auto w = works[i];
        works.erase(i);
        if (i != first) wait(i, w);  // returns at once; raises a failed operation's error
        const Item& it = items[i];
        if (it.role == SEND) {
          todo.emplace_back(COMPLETE, i);
          todo.emplace_back(READ, i);
        } else if (it.staged) {
          arrived[i] = 1;
          todo.emplace_back(APPLY, i);
        } else {
          todo.emplace_back(COMPLETE, i);
        }
      }
    }
  }
};

}  // namespace

Outcome Plan::run(const std::vector<at::Tensor>& bufs, int64_t s, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                  const at::Tensor& arena, int64_t op, double seconds, bool dataflow,
                  std::shared_ptr<Check> check) const {
  Engine engine(*this, bufs, s, pg, arena, op, seconds, check);
  Watched watched(check);
  try {
    if (dataflow) {
      engine.dataflow();
    } else {
      engine.grouped();
    }
  } catch (const Failure& f) {
    bool timed_out = f.status == TIMED_OUT || Clock::now() >= engine.deadline - std::chrono::milliseconds(10);
    return noted(*this, check, f, timed_out);
  } catch (const std::exception& e) {
    if (check) check->note_failure(std::string("internal error: ") + e.what());
    return {INTERNAL, -1, e.what()};
  }
  if (check && check->store) check->forget();
  return {OK, -1, ""};
}

Outcome exchange_rows(const at::Tensor& mine, const at::Tensor& rows, int64_t rank,
                      const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t tag, double seconds,
                      std::shared_ptr<Check> check) {
  Watched watched(check);
  auto backend = pg->getBackend(mine.device().type());
  const int64_t p = rows.size(0);
  auto deadline = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  std::vector<std::pair<int64_t, c10::intrusive_ptr<c10d::Work>>> recvs, sends;
  int64_t at = -1;
  try {
    rows.select(0, rank).copy_(mine);
    for (int64_t src = 0; src < p; ++src) {
      at = src;
      if (src == rank) {
        for (int64_t dst = 0; dst < p; ++dst) {
          if (dst == rank) continue;
          at = dst;
          std::vector<at::Tensor> v{mine};
          sends.emplace_back(dst, backend->send(v, static_cast<int>(dst), static_cast<int>(tag)));
        }
      } else {
        std::vector<at::Tensor> v{rows.select(0, src)};
        recvs.emplace_back(src, backend->recv(v, static_cast<int>(src), static_cast<int>(tag)));
      }
    }
    for (auto* list : {&recvs, &sends}) {
      for (auto& [peer, w] : *list) {
        at = peer;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) throw Failure{TIMED_OUT, peer, "timed out"};
        watched_wait(check, w, left, peer);
      }
    }
  } catch (const Failure& f) {
    std::string text = f.text;
    if (check && f.status != MISMATCH) {
      if (Clock::now() >= deadline - std::chrono::milliseconds(10)) text += check->blame();
      check->note_failure(f.status == PEER_FAILED ? "abandoned exchanging metadata: rank " + f.text
                                                  : "exchanging metadata with peer rank " + std::to_string(at) +
                                                        ": " + f.text);
    }
    return {f.status, at, text};
  } catch (const std::exception& e) {
    std::string text = e.what();
    auto nl = text.find('\n');
    if (nl != std::string::npos) text = text.substr(0, nl);
    if (check) check->note_failure("exchanging metadata with peer rank " + std::to_string(at) + ": " + text);
    return {FAILED, at, text};
  }
  if (check && check->store) check->reset();  // the run that follows keeps the watch (and its own row)
  return {OK, -1, ""};
}

void transport_floor(const std::vector<std::vector<int64_t>>& rows, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                     int64_t repeats) {
  auto backend = pg->getBackend(c10::DeviceType::CPU);
  std::vector<at::Tensor> bufs;
  for (const auto& r : rows) {
    TORCH_CHECK(r.size() == 5, "collsched transport_floor: a row needs 5 fields, got ", r.size());
    bufs.push_back(at::empty({r[3]}, at::TensorOptions().dtype(at::kByte)));
  }
  for (int64_t rep = 0; rep < repeats; ++rep) {
    size_t i = 0;
    while (i < rows.size()) {
      size_t j = i;
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (; j < rows.size() && rows[j][0] == rows[i][0]; ++j) {
        std::vector<at::Tensor> v{bufs[j]};
        int peer = static_cast<int>(rows[j][2]), tag = static_cast<int>(rows[j][4]);
        works.push_back(rows[j][1] == SEND ? backend->send(v, peer, tag) : backend->recv(v, peer, tag));
      }
      for (auto& w : works) w->wait();
      i = j;
    }
  }
}

}  // namespace collsched
