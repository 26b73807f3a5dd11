// The problems served untuned (see served_shapes.h).
#include "server/served_shapes.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace kt::server {
namespace {

auto KeyOrder(const ServedKey& k) {
  return std::make_tuple(k.op, k.dtype, k.shape.rows, k.shape.cols, k.shape.inner);
}

// Most Runs first, then by key.
void SortByRuns(std::vector<ServedShape>& shapes) {
  std::sort(shapes.begin(), shapes.end(), [](const ServedShape& a, const ServedShape& b) {
    if (a.runs != b.runs) return a.runs > b.runs;
    return KeyOrder(a.key) < KeyOrder(b.key);
  });
}

}  // namespace

std::vector<ServedShape> MergeServedShapes(std::vector<ServedShape> shapes) {
  absl::flat_hash_map<ServedKey, size_t> at;
  std::vector<ServedShape> merged;
  for (ServedShape& shape : shapes) {
    auto [it, added] = at.emplace(shape.key, merged.size());
    if (added) {
      merged.push_back(std::move(shape));
      continue;
    }
    ServedShape& into = merged[it->second];
    into.runs += shape.runs;
    into.first_seen = std::min(into.first_seen, shape.first_seen);
    if (shape.last_seen > into.last_seen) {
      into.last_seen = shape.last_seen;
      into.source = shape.source;
    }
  }
  SortByRuns(merged);
  return merged;
}

void ServedShapes::Slot::Count(tuner::ConfigSource source, absl::Time now) {
  runs_.fetch_add(1, std::memory_order_relaxed);
  last_seen_ns_.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
  source_.store(static_cast<int>(source), std::memory_order_relaxed);
}

ServedShapes::ServedShapes(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::shared_ptr<ServedShapes::Slot> ServedShapes::Find(const ServedKey& key,
                                                       int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation < generation_) return nullptr;
  if (auto it = slots_.find(key); it != slots_.end()) return it->second;
  if (slots_.size() >= capacity_) EvictOldest();
  auto slot = std::make_shared<Slot>(absl::Now());
  slots_.emplace(key, slot);
  return slot;
}

void ServedShapes::EvictOldest() {
  // An eighth at a time: a stream of new problems pays for one sort per
  // capacity/8 of them, not one scan each.
  std::vector<std::pair<int64_t, ServedKey>> by_age;
  by_age.reserve(slots_.size());
  for (const auto& [key, slot] : slots_) {
    by_age.emplace_back(slot->last_seen_ns_.load(std::memory_order_relaxed), key);
  }
  const size_t evict = std::max<size_t>(capacity_ / 8, 1);
  std::nth_element(by_age.begin(), by_age.begin() + (evict - 1), by_age.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < evict; ++i) {
    auto it = slots_.find(by_age[i].second);
    it->second->dropped_.store(true, std::memory_order_relaxed);
    slots_.erase(it);
  }
  evicted_ += static_cast<int64_t>(evict);
}

void ServedShapes::Prune(absl::FunctionRef<bool(const ServedKey&)> tuned, int64_t generation) {
  std::vector<ServedKey> keys;
  {
    absl::MutexLock lock(&mu_);
    // From here a Run looked up in an older table records nothing; those
    // recorded before are among `keys`.
    generation_ = std::max(generation_, generation);
    keys.reserve(slots_.size());
    for (const auto& [key, slot] : slots_) keys.push_back(key);
  }
  std::vector<ServedKey> drop;
  for (const ServedKey& key : keys) {
    if (tuned(key)) drop.push_back(key);
  }
  absl::MutexLock lock(&mu_);
  for (const ServedKey& key : drop) {
    auto it = slots_.find(key);
    if (it == slots_.end()) continue;
    it->second->dropped_.store(true, std::memory_order_relaxed);
    slots_.erase(it);
  }
}

std::vector<ServedShape> ServedShapes::List() const {
  std::vector<ServedShape> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(slots_.size());
    for (const auto& [key, slot] : slots_) {
      const int64_t runs = slot->runs_.load(std::memory_order_relaxed);
      if (runs == 0) continue;  // made, not counted yet
      out.push_back({key, runs, slot->first_seen_,
                     absl::FromUnixNanos(slot->last_seen_ns_.load(std::memory_order_relaxed)),
                     static_cast<tuner::ConfigSource>(
                         slot->source_.load(std::memory_order_relaxed))});
    }
  }
  SortByRuns(out);
  return out;
}

int64_t ServedShapes::evicted() const {
  absl::MutexLock lock(&mu_);
  return evicted_;
}

}  // namespace kt::server
