// The in-band argument check (check.h): the salt, each run's watch and the one watchdog thread.

#include "check.h"

#include <cstring>
#include <thread>
#include <unordered_map>
#include <unistd.h>

namespace collsched {

bool rows_differ(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (int f : kAgree) {
    if (f == kCount && (a[f] < 0 || b[f] < 0)) continue;  // an idle alltoallv rank has no count
    if (a[f] != b[f]) return true;
  }
  return false;
}

int64_t salt_of(const std::vector<int64_t>& row, int64_t counter, int64_t shift) {
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

std::shared_ptr<Check> Check::make(c10::intrusive_ptr<c10d::Store> store, int64_t counter, std::vector<int64_t> row,
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

Check::Found Check::look() {
  std::lock_guard<std::mutex> g(io);
  if (finished) return NONE;
  for (int64_t q = 0; q < p; ++q) {  // a peer that failed this call first: what it said
    if (q == rank || !store->check({failure_key(q)})) continue;
    auto bytes = store->get(failure_key(q));
    failed = std::to_string(q) + ":" + std::string(bytes.begin(), bytes.end());
    return PEER_FAILED;
  }
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
  if (!differ) return NONE;
  std::string text;
  for (auto& [q, r] : rows) {
    if (!text.empty()) text += ";";
    text += std::to_string(q) + ":";
    for (size_t k = 0; k < r.size(); ++k) text += (k ? "," : "") + std::to_string(r[k]);
  }
  seen = text;
  return DIFFER;
}

void Check::note_failure(const std::string& text) {
  if (!store) return;
  std::lock_guard<std::mutex> g(io);
  try {
    store->set(failure_key(rank), std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {  // the store is gone with a peer that hosted it: nobody to tell
  }
}

std::string Check::note_of(int64_t q, double seconds) {
  if (!store || q < 0 || q >= p) return "";
  std::lock_guard<std::mutex> g(io);
  try {
    if (!store->check({failure_key(q)})) {
      if (seconds <= 0) return "";
      store->wait({failure_key(q)}, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
    }
    auto bytes = store->get(failure_key(q));
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return "";
  }
}

std::string Check::blame() {
  if (!store || p < 2) return "";
  std::lock_guard<std::mutex> g(io);
  std::string stalled, silent;
  try {
    for (int64_t q = 0; q < p; ++q) {
      if (q == rank) continue;
      std::string& into = store->check({key(q)}) || store->check({failure_key(q)}) ? stalled : silent;
      into += (into.empty() ? "" : ", ") + std::to_string(q);
    }
  } catch (const std::exception&) {
    return "";
  }
  if (silent.empty()) return " (stall watch: every peer is stalled in this call too; cannot tell which is late)";
  return " (stall watch: " + (stalled.empty() ? std::string("no peer") : "ranks " + stalled) +
         " stalled in this call too; no word from rank(s) " + silent +
         ": stopped, dead, not in this call, or finished with their part)";
}

void Check::reset() {
  std::lock_guard<std::mutex> g(io);
  if (!written) return;
  written = false;
  try {
    store->deleteKey(key(rank));
  } catch (const std::exception&) {
  }
}

void Check::forget() {
  std::lock_guard<std::mutex> g(io);
  finished = true;
  if (written) {
    try {
      store->deleteKey(key(rank));
    } catch (const std::exception&) {  // the store is gone at shutdown: nothing to clean
    }
  }
}

namespace {

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
          if (c->waiting && !c->mismatch && !c->peer_failed &&
              now - c->since >= std::chrono::duration<double>(c->stall_s) &&
              now >= c->next_look) {
            due.push_back(c);
          }
        }
      }
      for (auto& c : due) {
        Check::Found found = Check::NONE;
        try {
          found = c->look();
        } catch (const std::exception&) {  // a store that fails: the run's own deadline still holds
        }
        std::lock_guard<std::mutex> cg(c->m);
        bool differ = found == Check::DIFFER;
        if (found == Check::PEER_FAILED) {
          c->peer_failed = true;  // waiting on is pointless: the run ends naming the peer that failed
          if (c->waiting) c->waiting->abort();
        } else if (differ && !c->confirming) {
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

}  // namespace

Watched::Watched(std::shared_ptr<Check> c) : c_(std::move(c)) {
  if (c_ && c_->store) Watchdog::get().add(c_);
}

Watched::~Watched() {
  if (c_ && c_->store) Watchdog::get().remove(c_);
}

int64_t next_call(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
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

}  // namespace collsched
