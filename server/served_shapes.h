// ServedShapes: the problems a device's config cache served without a
// current tuned entry for exactly them (a nearest tuned entry or the
// heuristic), with how often and when, for `kerntune tune --served`. In
// memory only and bounded; the tuner, not the daemon, writes the store.
#ifndef KERNTUNE_SERVER_SERVED_SHAPES_H_
#define KERNTUNE_SERVER_SERVED_SHAPES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/types.h"
#include "tuner/config_lookup.h"

namespace kt::server {

// A problem as the config lookup keys it.
struct ServedKey {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;

  friend bool operator==(const ServedKey& a, const ServedKey& b) {
    return a.op == b.op && a.dtype == b.dtype && a.shape == b.shape;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ServedKey& k) {
    return H::combine(std::move(h), k.op, k.dtype, k.shape.rows, k.shape.cols, k.shape.inner);
  }
};

// One recorded problem, as listed.
struct ServedShape {
  ServedKey key;
  int64_t runs = 0;
  absl::Time first_seen;
  absl::Time last_seen;
  tuner::ConfigSource source = tuner::ConfigSource::kHeuristic;  // the last Run's
};

// Several devices' lists (of one SKU) as one: a problem's Runs summed, its
// first and last seen the earliest and the latest, its source the latest
// one's; most Runs first (ties by key), as ServedShapes::List.
std::vector<ServedShape> MergeServedShapes(std::vector<ServedShape> shapes);

class ServedShapes {
 public:
  // A recorded problem's counters. A Run counts itself here without the
  // table's lock (relaxed atomics: a listing may see a count a Run behind).
  class Slot {
   public:
    explicit Slot(absl::Time now) : first_seen_(now), last_seen_ns_(absl::ToUnixNanos(now)) {}
    void Count(tuner::ConfigSource source, absl::Time now);
    // Left the table (evicted, or tuned since): a Run that still holds it
    // asks the table for a slot again.
    bool dropped() const { return dropped_.load(std::memory_order_relaxed); }

   private:
    friend class ServedShapes;
    const absl::Time first_seen_;
    std::atomic<int64_t> last_seen_ns_;
    std::atomic<int64_t> runs_{0};
    std::atomic<int> source_{static_cast<int>(tuner::ConfigSource::kHeuristic)};
    std::atomic<bool> dropped_{false};
  };

  // 4096 problems (a few hundred KiB): far more distinct shapes than a
  // serving process sends, few enough that a client sending random shapes
  // costs the daemon little.
  static constexpr size_t kDefaultCapacity = 4096;
  explicit ServedShapes(size_t capacity = kDefaultCapacity);

  // The slot of `key`, made when new. A full table first evicts its least
  // recently seen eighth (at least one), counted in evicted(). Null when
  // `generation` (of the config table the Run was looked up in) is older
  // than the last Prune's: the problem may be tuned by now.
  std::shared_ptr<Slot> Find(const ServedKey& key, int64_t generation);

  // Refuses Finds of generations before `generation` from now on, then
  // drops every problem `tuned` says now has a current tuned entry (called
  // outside the table's lock: Runs are not held up by it).
  void Prune(absl::FunctionRef<bool(const ServedKey&)> tuned, int64_t generation);

  // Every recorded problem that was counted, most Runs first (ties by key).
  std::vector<ServedShape> List() const;
  // Problems evicted to make room since the start.
  int64_t evicted() const;
  size_t capacity() const { return capacity_; }

 private:
  void EvictOldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ServedKey, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_SERVED_SHAPES_H_
