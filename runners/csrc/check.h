// The in-band argument check of a run whose signature was checked before (runners/execution/arguments.py's design
// note "The check after the first call").
//
// Included by executor.cpp before the Plan class. Two parts:
//   - the salt: every data tag of a checked run carries, above the transfer id, a hash of the rank's own
//     metadata row (schedule checksum, per-rank count, dtype, op, ...) and of the group's call counter.
//     Ranks whose arguments agree post the same tags; a rank whose arguments differ posts tags no peer
//     posts, so none of its messages is ever matched: no data moves between ranks that disagree (and
//     gloo never sees a message larger than the receive posted for it, which would abort the process).
//   - the stall watch: such a run cannot finish, so every wait of the run is watched by one process-wide
//     thread. A wait still outstanding after `stall_s` seconds writes the rank's row to the group's store
//     (key prefix/<counter>/<rank>) and reads the rows its peers wrote; rows that differ in what every rank
//     must agree on abort the outstanding operation (c10d::Work::abort, which leaves the pair usable), and
//     the run returns MISMATCH with the rows it saw, from which Python names the ranks and the argument.
//     A peer that is merely late writes nothing, so waiting goes on as before, until the run's deadline.
//
// A row is runners.execution.arguments.metadata's 12 integers followed by one flag: 1 when this rank skipped the
// exchange because the signature was checked before, 0 when it is exchanging rows (the first call).

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unistd.h>

namespace collsched_check {

using Clock = std::chrono::steady_clock;

// Row fields every rank must agree on (runners.execution.arguments.check_table compares the same ones):
// local error code, per-rank count (compared among ranks that have one), dtype, op, schedule checksum,
// kind, ranks, chunks, root, and the flag (checked before or not).
constexpr int kCode = 0, kCount = 2, kFlag = 12, kRowLength = 13;
constexpr int kAgree[] = {0, 2, 5, 6, 7, 8, 9, 10, 11, 12};

inline bool rows_differ(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (int f : kAgree) {
    if (f == kCount && (a[f] < 0 || b[f] < 0)) continue;  // an idle alltoallv rank has no count
    if (a[f] != b[f]) return true;
  }
  return false;
}

// FNV-1a over the fields that must agree (the flag excepted) and the call counter; runners.execution.arguments.salt
// computes the same value in Python, and a test compares the two.
inline int64_t salt_of(const std::vector<int64_t>& row, int64_t counter, int64_t shift) {
  const int64_t bits = 30 - shift;
  if (bits < 8) return 0;  // too many transfers to spare the bits: runs with this schedule are checked each call
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64: offset basis and prime
  auto mix = [&h](int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int k = 0; k < 8; ++k) {
      h ^= (u >> (8 * k)) & 0xffULL;
      h *= 1099511628211ULL;
    }
  };
  for (int f : kAgree) {
    if (f != kFlag) mix(f == kCount && row[f] < 0 ? -1 : row[f]);
  }
  mix(counter);
  const uint64_t span = (1ULL << bits) - 1;  // salts 1 .. 2^bits - 1: never the unsalted tags
  return static_cast<int64_t>((h % span) + 1) << shift;
}

// One run's check: what its waits are watched with.
struct Check {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;  // collsched-stall/<counter>/ (the store is the group's own)
  std::vector<int64_t> row;
  int64_t rank = 0, p = 1, salt = 0;
  double stall_s = 1.0;

  // Watch state (the watchdog thread and the run's thread; m guards it, io the store rows).
  std::mutex m, io;
  bool finished = false;
  c10::intrusive_ptr<c10d::Work> waiting;
  Clock::time_point since{}, next_look{};
  bool written = false, mismatch = false, confirming = false;
  std::string seen;  // "rank:v,v,...;rank:..." of every row seen when a mismatch was found

  // The watch of checked call number `counter` on its group (rows under collsched-stall/<counter>/<rank>).
  static std::shared_ptr<Check> make(c10::intrusive_ptr<c10d::Store> store, int64_t counter, std::vector<int64_t> row,
                                     int64_t rank, int64_t p, int64_t salt, double stall_s) {
    auto c = std::make_shared<Check>();
    c->store = std::move(store);
    c->prefix = "collsched-stall/" + std::to_string(counter) + "/";
    c->row = std::move(row);
    c->rank = rank;
    c->p = p;
    c->salt = salt;
    c->stall_s = stall_s;
    return c;
  }

  std::string key(int64_t r) const { return prefix + std::to_string(r); }

  // The watchdog's look at a stalled wait: write our row once, read our peers'. Store I/O under `io` only,
  // so that a run ending meanwhile (forget) never leaves its row behind.
  bool look() {
    std::lock_guard<std::mutex> g(io);
    if (finished) return false;
    if (!written) {
      std::vector<uint8_t> bytes(row.size() * sizeof(int64_t));
      std::memcpy(bytes.data(), row.data(), bytes.size());
      store->set(key(rank), bytes);
      written = true;
    }
    std::vector<std::pair<int64_t, std::vector<int64_t>>> rows{{rank, row}};
    bool differ = false;
    for (int64_t q = 0; q < p; ++q) {
      if (q == rank || !store->check({key(q)})) continue;
      auto bytes = store->get(key(q));
      std::vector<int64_t> theirs(bytes.size() / sizeof(int64_t));
      std::memcpy(theirs.data(), bytes.data(), theirs.size() * sizeof(int64_t));
      if (theirs.size() != row.size()) continue;
      differ = differ || rows_differ(row, theirs);
      rows.emplace_back(q, std::move(theirs));
    }
    if (!differ) return false;
    std::string text;
    for (auto& [q, r] : rows) {
      if (!text.empty()) text += ";";
      text += std::to_string(q) + ":";
      for (size_t k = 0; k < r.size(); ++k) text += (k ? "," : "") + std::to_string(r[k]);
    }
    seen = text;
    return true;
  }

  // After a successful run: our row, if written, is no longer anybody's concern.
  void forget() {
    std::lock_guard<std::mutex> g(io);
    finished = true;
    if (written) {
      try {
        store->deleteKey(key(rank));
      } catch (const std::exception&) {  // the store is gone at shutdown: nothing to clean
      }
    }
  }
};

// The one thread that watches every checked run's waits (started on first use, again after a fork).
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* dog = new Watchdog();  // never destroyed: its thread may outlive static destructors
    return *dog;
  }

  void add(const std::shared_ptr<Check>& c) {
    std::lock_guard<std::mutex> g(m_);
    if (pid_ != getpid()) {  // a forked child has no thread
      pid_ = getpid();
      std::thread([this] { loop(); }).detach();
    }
    checks_.push_back(c);
  }

  void remove(const std::shared_ptr<Check>& c) {
    std::lock_guard<std::mutex> g(m_);
    for (size_t k = 0; k < checks_.size(); ++k) {
      if (checks_[k] == c) {
        checks_.erase(checks_.begin() + static_cast<std::ptrdiff_t>(k));
        return;
      }
    }
  }

 private:
  Watchdog() = default;

  void loop() {
    const pid_t mine = getpid();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no wake-ups to send: runs never notify
      std::vector<std::shared_ptr<Check>> due;
      {
        std::lock_guard<std::mutex> g(m_);
        if (pid_ != mine) return;
        auto now = Clock::now();
        for (auto& c : checks_) {
          std::lock_guard<std::mutex> cg(c->m);
          if (c->waiting && !c->mismatch && now - c->since >= std::chrono::duration<double>(c->stall_s) &&
              now >= c->next_look) {
            due.push_back(c);
          }
        }
      }
      for (auto& c : due) {
        bool differ = false;
        try {
          differ = c->look();
        } catch (const std::exception&) {  // a store that fails: the run's own deadline still holds
        }
        std::lock_guard<std::mutex> cg(c->m);
        if (differ && !c->confirming) {
          // Peers that stalled too write their rows within about one poll of each other: one more look
          // shortly, so that the error names as many of them as there are.
          c->confirming = true;
          c->next_look = Clock::now() + std::chrono::milliseconds(300);
        } else if (differ || c->confirming) {
          c->mismatch = true;
          if (c->waiting) c->waiting->abort();  // its wait() returns false; the pair stays usable
        } else {
          c->next_look = Clock::now() + std::chrono::milliseconds(500);
        }
      }
    }
  }

  std::mutex m_;
  pid_t pid_ = 0;
  std::vector<std::shared_ptr<Check>> checks_;
};

// Registers a run's check with the watchdog for the run's duration.
class Watched {
 public:
  explicit Watched(std::shared_ptr<Check> c) : c_(std::move(c)) {
    if (c_ && c_->store) Watchdog::get().add(c_);
  }
  ~Watched() {
    if (c_ && c_->store) Watchdog::get().remove(c_);
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  std::shared_ptr<Check> c_;
};

// The checked runs made on each process group so far: the counter every rank of a group advances
// identically. Keyed by the group object; a group made later at a freed group's address starts afresh.
inline int64_t next_call(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  static std::mutex m;
  using Entry = std::pair<c10::weak_intrusive_ptr<c10d::ProcessGroup>, int64_t>;
  static auto* counts = new std::unordered_map<const void*, Entry>();
  std::lock_guard<std::mutex> g(m);
  auto it = counts->find(group.get());
  if (it != counts->end() && it->second.first.lock().get() != group.get()) {
    counts->erase(it);
    it = counts->end();
  }
  if (it == counts->end()) {
    it = counts->emplace(group.get(), Entry(c10::weak_intrusive_ptr<c10d::ProcessGroup>(group), 0)).first;
  }
  return it->second.second++;
}

}  // namespace collsched_check
