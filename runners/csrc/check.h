// The in-band argument check of a run whose signature was checked before (runners/execution/arguments.py's design
// note "The check after the first call").
//
// Two parts:
//   - the salt: every data tag of a checked run carries, above the transfer id, a hash of the rank's own
//     metadata row (schedule checksum, per-rank count, dtype, op, ...) and of the group's call counter.
//     Ranks whose arguments agree post the same tags; a rank whose arguments differ posts tags no peer
//     posts, so none of its messages is ever matched: no data moves between ranks that disagree (and
//     gloo never sees a message larger than the receive posted for it, which would abort the process).
//   - the stall watch: such a run cannot finish, so every wait of the run is watched by one process-wide
//     thread (check.cpp's Watchdog). A wait still outstanding after `stall_s` seconds writes the rank's row to
//     the group's store (key prefix/<counter>/<rank>) and reads the rows its peers wrote; rows that differ in
//     what every rank must agree on abort the outstanding operation (c10d::Work::abort, which leaves the pair
//     usable), and the run returns MISMATCH with the rows it saw, from which Python names the ranks and the
//     argument. A peer that is merely late writes nothing, so waiting goes on as before, until the run's
//     deadline.
//   - failures: a rank whose run of this call fails leaves a note under prefix/failed/<rank> (note_failure). A
//     stalled wait that finds a peer's note abandons the run at once (PEER_FAILED, naming that peer and what
//     it said): a rank waiting on a peer that failed (or on one waiting on it) learns within about stall_s
//     instead of at its own deadline. And a run that times out names, with blame(), the peers stalled in this
//     call too (their rows are in the store: alive, waiting) and those that never wrote (stopped, dead or
//     finished): the rank to look at is among the latter.
//
// A row is runners.execution.arguments.metadata's 12 integers followed by one flag: 1 when this rank skipped the
// exchange because the signature was checked before, 0 when it is exchanging rows (the first call).

#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace collsched {

using Clock = std::chrono::steady_clock;

// Row fields every rank must agree on (runners.execution.arguments.check_table compares the same ones):
// local error code, per-rank count (compared among ranks that have one), dtype, op, schedule checksum,
// kind, ranks, chunks, root, and the flag (checked before or not).
constexpr int kCode = 0, kCount = 2, kFlag = 12, kRowLength = 13;
constexpr int kAgree[] = {0, 2, 5, 6, 7, 8, 9, 10, 11, 12};

bool rows_differ(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// FNV-1a over the fields that must agree (the flag excepted) and the call counter; runners.execution.arguments.salt
// computes the same value in Python, and a test compares the two.
int64_t salt_of(const std::vector<int64_t>& row, int64_t counter, int64_t shift);

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
  bool written = false, mismatch = false, confirming = false, peer_failed = false;
  std::string seen;    // "rank:v,v,...;rank:..." of every row seen when a mismatch was found
  std::string failed;  // "rank:text" of the first peer found to have failed this call

  // The watch of checked call number `counter` on its group (rows under collsched-stall/<counter>/<rank>).
  static std::shared_ptr<Check> make(c10::intrusive_ptr<c10d::Store> store, int64_t counter, std::vector<int64_t> row,
                                     int64_t rank, int64_t p, int64_t salt, double stall_s);

  std::string key(int64_t r) const { return prefix + std::to_string(r); }
  std::string failure_key(int64_t r) const { return prefix + "failed/" + std::to_string(r); }

  // The watchdog's look at a stalled wait: write our row once, read our peers' and their failure notes. NONE,
  // DIFFER (rows differ: seen holds them) or PEER_FAILED (failed holds the first peer's note). Store I/O under
  // `io` only, so that a run ending meanwhile (forget) never leaves its row behind.
  enum Found : int { NONE = 0, DIFFER = 1, PEER_FAILED = 2 };
  Found look();

  // This rank's run of the call failed: a note for peers that stall waiting on it (never throws).
  void note_failure(const std::string& text);

  // Peer q's note for this call, waiting up to `seconds` for it ("" when it left none, or the store cannot
  // tell; never throws): what a rank whose transfer with q failed says q had failed with. A peer whose own
  // wait timed out closes the pair at once (gloo) and writes its note a moment later: hence the wait.
  std::string note_of(int64_t q, double seconds = 0.0);

  // For a run that timed out: which peers are stalled in this call too (rows in the store) and which never
  // wrote, as " (stall watch: ...)"; empty when the store cannot tell (never throws).
  std::string blame();

  // After a successful run: our row, if written, is no longer anybody's concern.
  void forget();

  // After a successful exchange of rows (the first call of a signature): as forget, but the watch goes on
  // for the run that follows with the same check.
  void reset();
};

// Registers a run's check with the watchdog for the run's duration.
class Watched {
 public:
  explicit Watched(std::shared_ptr<Check> c);
  ~Watched();
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  std::shared_ptr<Check> c_;
};

// The checked runs made on each process group so far: the counter every rank of a group advances
// identically. Keyed by the group object; a group made later at a freed group's address starts afresh.
int64_t next_call(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

}  // namespace collsched
