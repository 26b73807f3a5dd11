// ConfigCache on a temp tuning store and a described H100: exact, nearest,
// illegal nearest -> heuristic, other SKUs ignored, reload on change; shipped
// entries after local ones; stale entries never served, and counted; a store
// unreadable, deleted, replaced or damaged under the cache; the problems
// Runs were served untuned, recorded until the store holds their entry.
#include "server/config_cache.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/version.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tuned_row.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using kernels::DType;
using kernels::Op;
using kernels::Shape;
using tuner::ConfigSource;
using tuner::EntryOrigin;

constexpr char kOlderKernels[] = "0.1.0+k1";

db::BestConfig Row(Op op, DType dtype, Shape shape, const kernels::LaunchConfig& config,
                   double median_us, const std::string& kernel_version =
                                         kernels::kKernelLibraryVersion) {
  return kt::testing::TunedRow(op, dtype, shape, config, median_us, kernel_version);
}

// A shipped file's entry, as the daemon reads it.
tuner::TunedEntry Shipped(const db::BestConfig& row) {
  return *tuner::EntryFromRow(row, EntryOrigin::kShipped);
}

class ConfigCacheTest : public ::testing::Test {
 protected:
  void Import(const std::vector<db::BestConfig>& rows,
              const db::GpuSku& sku = tuner::SkuOf(kernels::DescribedH100())) {
    ImportInto(path_, rows, sku);
  }
  void ImportInto(const std::string& path, const std::vector<db::BestConfig>& rows,
                  const db::GpuSku& sku = tuner::SkuOf(kernels::DescribedH100())) {
    db::OpenOptions options;
    options.create_if_missing = true;
    auto store = db::TuningStore::Open(path, options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->ImportBestConfigs(sku, rows).ok());
  }

  std::unique_ptr<ConfigCache> MakeCache(std::vector<tuner::TunedEntry> shipped = {}) {
    auto cache = ConfigCache::Create(path_, device_, std::move(shipped));
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  // A legal config for `shape` that is not the heuristic's, and (when
  // `also` is given) also legal for `also`.
  kernels::LaunchConfig NonHeuristic(Op op, DType dtype, Shape shape) {
    auto heuristic = kernels::HeuristicConfig(op, dtype, shape, device_);
    auto configs = kernels::EnumerateConfigs(op, dtype, shape, device_);
    EXPECT_TRUE(configs.ok() && heuristic.ok());
    for (const auto& config : *configs) {
      if (config != *heuristic) return config;
    }
    ADD_FAILURE() << "no config other than the heuristic";
    return *heuristic;
  }

  kt::testing::ScopedTempDir dir_;
  const std::string path_ = dir_.File("tuning.db");
  const kernels::DeviceInfo device_ = kernels::DescribedH100();
};

TEST_F(ConfigCacheTest, ExactTunedPointWins) {
  const Shape shape{4096, 1024};
  const auto config = NonHeuristic(Op::kSoftmax, DType::kFloat16, shape);
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, config, 12.5)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Entries().size(), 1u);
  EXPECT_GT(cache->data_version(), 0);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kTuned);
  EXPECT_EQ(choice->config, config);
  ASSERT_TRUE(choice->tuned.has_value());
  EXPECT_EQ(choice->tuned->median_us, 12.5);
  // The same shape of another op or dtype is not tuned.
  auto other = cache->Lookup(Op::kLogSoftmax, DType::kFloat16, shape);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->source, ConfigSource::kHeuristic);
  EXPECT_EQ(other->config,
            *kernels::HeuristicConfig(Op::kLogSoftmax, DType::kFloat16, shape, device_));
}

TEST_F(ConfigCacheTest, NearestTunedPointInLogSpace) {
  // block_uncached configs are legal for any cols, so both are candidates.
  const auto near = *kernels::ParseLaunchConfig("block_uncached/b256/p1/g32/r1/w0");
  const auto far = *kernels::ParseLaunchConfig("block_uncached/b512/p1/g32/r1/w0");
  Import({Row(Op::kLayerNorm, DType::kFloat32, {1024, 512}, near, 3),
          Row(Op::kLayerNorm, DType::kFloat32, {1024, 4096}, far, 9)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  // cols 1024: log2 distance 1 to 512, 2 to 4096.
  auto choice = cache->Lookup(Op::kLayerNorm, DType::kFloat32, {1000, 1024});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
  EXPECT_EQ(choice->config, near);
  EXPECT_EQ(choice->tuned->shape.cols, 512);
  // cols 3000 is nearer 4096.
  choice = cache->Lookup(Op::kLayerNorm, DType::kFloat32, {1024, 3000});
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
  EXPECT_EQ(choice->config, far);
}

TEST_F(ConfigCacheTest, IllegalNearestFallsBackToTheHeuristic) {
  // A config tuned for short rows (a sub-warp holding the row in
  // registers) that cannot hold rows of 4096 columns.
  const Shape query{4096, 4096};
  auto configs = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat32, {4096, 64}, device_);
  ASSERT_TRUE(configs.ok());
  std::optional<kernels::LaunchConfig> illegal;
  for (const auto& config : *configs) {
    if (!kernels::ValidateConfig(Op::kSoftmax, DType::kFloat32, query, config, device_).ok()) {
      illegal = config;
      break;
    }
  }
  ASSERT_TRUE(illegal.has_value());
  const kernels::LaunchConfig narrow = *illegal;
  Import({Row(Op::kSoftmax, DType::kFloat32, {4096, 64}, narrow, 2)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat32, query);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
  EXPECT_FALSE(choice->tuned.has_value());
  EXPECT_EQ(choice->config,
            *kernels::HeuristicConfig(Op::kSoftmax, DType::kFloat32, query, device_));
}

TEST_F(ConfigCacheTest, NewOpsAreTunedPointsOfTheirOwn) {
  const Shape shape{2048, 1024};
  const auto rms = NonHeuristic(Op::kRmsNorm, DType::kBFloat16, shape);
  const auto scale = NonHeuristic(Op::kReduceScale, DType::kBFloat16, shape);
  const auto masked = NonHeuristic(Op::kScaledMaskedSoftmax, DType::kBFloat16, shape);
  Import({Row(Op::kRmsNorm, DType::kBFloat16, shape, rms, 5),
          Row(Op::kReduceScale, DType::kBFloat16, shape, scale, 6),
          Row(Op::kScaledMaskedSoftmax, DType::kBFloat16, shape, masked, 7)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Entries().size(), 3u);
  for (const auto& [op, config, us] : {std::tuple(Op::kRmsNorm, rms, 5.0),
                                       std::tuple(Op::kReduceScale, scale, 6.0),
                                       std::tuple(Op::kScaledMaskedSoftmax, masked, 7.0)}) {
    auto choice = cache->Lookup(op, DType::kBFloat16, shape);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->source, ConfigSource::kTuned) << kernels::OpName(op);
    EXPECT_EQ(choice->config, config) << kernels::OpName(op);
    EXPECT_EQ(choice->tuned->median_us, us);
  }
  // Not the softmax's, even at the same shape.
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kBFloat16, shape)->source,
            ConfigSource::kHeuristic);
}

TEST_F(ConfigCacheTest, AMiddleAxisProblemIsNeverServedByALastAxisEntry) {
  // Tuned at (512, 896) on the last axis; asked for (512, 896, 48): the
  // same rows and cols, but another problem. Whatever answers (the axis
  // heuristic, or an error until the axis rules exist), it is not a tuned
  // entry.
  const Shape last{512, 896};
  const auto config = NonHeuristic(Op::kSoftmax, DType::kFloat16, last);
  Import({Row(Op::kSoftmax, DType::kFloat16, last, config, 3)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat16, {512, 896, 48});
  if (choice.ok()) {
    EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
    EXPECT_EQ(choice->config.impl, kernels::Impl::kAxis);
  }
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, last)->source, ConfigSource::kTuned);
}

TEST_F(ConfigCacheTest, MiddleAxisEntriesAreNearestOnlyWithinTheirInner) {
  const Shape tuned{512, 896, 48};
  auto heuristic = kernels::HeuristicConfig(Op::kLogSoftmax, DType::kFloat32, tuned, device_);
  if (!heuristic.ok()) {
    GTEST_SKIP() << "the axis implementation's rules have not landed: " << heuristic.status();
  }
  const auto axis = NonHeuristic(Op::kLogSoftmax, DType::kFloat32, tuned);
  Import({Row(Op::kLogSoftmax, DType::kFloat32, tuned, axis, 11),
          Row(Op::kLogSoftmax, DType::kFloat32, {512, 896},
              NonHeuristic(Op::kLogSoftmax, DType::kFloat32, {512, 896}), 9)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  auto choice = cache->Lookup(Op::kLogSoftmax, DType::kFloat32, tuned);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kTuned);
  EXPECT_EQ(choice->config, axis);
  EXPECT_EQ(choice->tuned->shape, tuned);
  // Another outer size of the same inner: the axis entry is the nearest.
  choice = cache->Lookup(Op::kLogSoftmax, DType::kFloat32, {256, 896, 48});
  ASSERT_TRUE(choice.ok()) << choice.status();
  if (choice->source == ConfigSource::kNearestTuned) {
    EXPECT_EQ(choice->tuned->shape, tuned);
  } else {
    EXPECT_EQ(choice->source, ConfigSource::kHeuristic);  // the entry is illegal there
  }
  // Another inner: neither entry.
  choice = cache->Lookup(Op::kLogSoftmax, DType::kFloat32, {512, 896, 32});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
  EXPECT_FALSE(choice->tuned.has_value());
}

TEST_F(ConfigCacheTest, OtherSkusAreNotLoaded) {
  db::GpuSku a100{"NVIDIA A100-SXM4-80GB", 8, 0, 108, int64_t{80} << 30};
  const auto config = NonHeuristic(Op::kSoftmax, DType::kFloat16, {64, 256});
  Import({Row(Op::kSoftmax, DType::kFloat16, {64, 256}, config, 1)}, a100);
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->Entries().empty());
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, {64, 256})->source,
            ConfigSource::kHeuristic);
}

TEST_F(ConfigCacheTest, MissingDatabaseIsEmptyUntilItAppears) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->Entries().empty());
  EXPECT_EQ(cache->data_version(), 0);
  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok());
  EXPECT_FALSE(*reloaded);
  const auto config = NonHeuristic(Op::kSoftmax, DType::kBFloat16, {8, 8192});
  Import({Row(Op::kSoftmax, DType::kBFloat16, {8, 8192}, config, 4)});
  reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kBFloat16, {8, 8192})->source,
            ConfigSource::kTuned);
}

TEST_F(ConfigCacheTest, ReloadsWhenTheStoreChanges) {
  const Shape shape{49152, 4096};
  const auto first = NonHeuristic(Op::kSoftmax, DType::kFloat16, shape);
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, first, 50)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  const int64_t version = cache->data_version();
  EXPECT_FALSE(*cache->ReloadIfChanged());  // nothing changed
  // This thread's memo of the problem, until the reload.
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat16, shape)->config, first);

  // A tuner finishes: a better config for the point and a new point.
  auto configs = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat16, shape, device_);
  ASSERT_TRUE(configs.ok());
  const auto second = configs->back();
  ASSERT_NE(second, first);
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, second, 40),
          Row(Op::kLogSoftmax, DType::kFloat16, shape, second, 41)});
  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_GT(cache->data_version(), version);
  EXPECT_EQ(cache->Entries().size(), 2u);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat16, shape);
  EXPECT_EQ(choice->config, second);
  EXPECT_EQ(choice->tuned->median_us, 40);
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat16, shape)->config, second);
}

// A thread remembers its last lookup; another cache (another device, or one
// made where a destroyed one was) never answers from it.
TEST_F(ConfigCacheTest, AThreadsLastLookupIsNeverAnotherCachesAnswer) {
  const Shape shape{4096, 1024};
  auto configs = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat16, shape, device_);
  ASSERT_TRUE(configs.ok());
  ASSERT_GT(configs->size(), 2u);
  const std::string other_path = dir_.File("other.db");
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, configs->front(), 5)});
  ImportInto(other_path, {Row(Op::kSoftmax, DType::kFloat16, shape, (*configs)[1], 6)});
  auto mine = MakeCache();
  auto other = ConfigCache::Create(other_path, device_);
  ASSERT_NE(mine, nullptr);
  ASSERT_TRUE(other.ok()) << other.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(mine->LookupForRun(Op::kSoftmax, DType::kFloat16, shape)->config, configs->front());
    EXPECT_EQ((*other)->LookupForRun(Op::kSoftmax, DType::kFloat16, shape)->config,
              (*configs)[1]);
  }
  for (int i = 0; i < 3; ++i) {
    mine.reset();
    ImportInto(path_, {Row(Op::kSoftmax, DType::kFloat16, shape, (*configs)[2 - i % 2], 4)});
    mine = MakeCache();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->LookupForRun(Op::kSoftmax, DType::kFloat16, shape)->config,
              (*configs)[2 - i % 2]);
  }
}

TEST_F(ConfigCacheTest, PollerPicksUpChangesAndStopsCleanly) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  cache->StartPolling(absl::Milliseconds(10));
  const Shape shape{128, 2048};
  const auto config = NonHeuristic(Op::kLayerNorm, DType::kFloat16, shape);
  Import({Row(Op::kLayerNorm, DType::kFloat16, shape, config, 7)});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (cache->Lookup(Op::kLayerNorm, DType::kFloat16, shape)->source != ConfigSource::kTuned &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(cache->Lookup(Op::kLayerNorm, DType::kFloat16, shape)->source, ConfigSource::kTuned);
  cache->StopPolling();
  cache->StopPolling();  // idempotent
}

TEST_F(ConfigCacheTest, AShippedEntryServesWhenTheLocalStoreIsEmpty) {
  const Shape shape{4096, 2048};
  const auto config = NonHeuristic(Op::kRmsNorm, DType::kBFloat16, shape);
  auto cache = MakeCache({Shipped(Row(Op::kRmsNorm, DType::kBFloat16, shape, config, 9.5))});
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->local_entries(), 0);
  EXPECT_EQ(cache->shipped_entries(), 1);
  auto choice = cache->Lookup(Op::kRmsNorm, DType::kBFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kShipped);
  EXPECT_EQ(choice->config, config);
  ASSERT_TRUE(choice->tuned.has_value());
  EXPECT_EQ(choice->tuned->origin, EntryOrigin::kShipped);
  EXPECT_EQ(choice->tuned->median_us, 9.5);
  // Another shape of the same op, dtype and inner: the shipped entry is
  // the nearest one.
  choice = cache->Lookup(Op::kRmsNorm, DType::kBFloat16, {4000, 2048});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
  EXPECT_EQ(choice->tuned->origin, EntryOrigin::kShipped);
}

TEST_F(ConfigCacheTest, ACurrentLocalEntryBeatsAShippedOne) {
  const Shape shape{49152, 1024};
  auto configs = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat16, shape, device_);
  ASSERT_TRUE(configs.ok() && configs->size() >= 2);
  const auto local = configs->front();
  const auto shipped = configs->back();
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, local, 30)});
  auto cache = MakeCache({Shipped(Row(Op::kSoftmax, DType::kFloat16, shape, shipped, 25))});
  ASSERT_NE(cache, nullptr);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kTuned);
  EXPECT_EQ(choice->config, local);
  EXPECT_EQ(choice->tuned->origin, EntryOrigin::kLocal);
  // Both are listed, local first.
  const std::vector<tuner::TunedEntry> entries = cache->Entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].origin, EntryOrigin::kLocal);
  EXPECT_EQ(entries[1].origin, EntryOrigin::kShipped);
}

TEST_F(ConfigCacheTest, StaleEntriesAreNeverServedAndAreCounted) {
  const Shape shape{8192, 4096};
  auto configs = kernels::EnumerateConfigs(Op::kLayerNorm, DType::kFloat16, shape, device_);
  ASSERT_TRUE(configs.ok() && configs->size() >= 3);
  const auto stale_local = (*configs)[0];
  const auto current_shipped = (*configs)[1];
  // A stale local entry at the point: the current shipped one serves.
  Import({Row(Op::kLayerNorm, DType::kFloat16, shape, stale_local, 10, kOlderKernels)});
  auto cache = MakeCache(
      {Shipped(Row(Op::kLayerNorm, DType::kFloat16, shape, current_shipped, 12))});
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->local_entries(), 0);
  EXPECT_EQ(cache->stale().local, 1);
  EXPECT_EQ(cache->stale().versions, std::set<std::string>{kOlderKernels});
  auto choice = cache->Lookup(Op::kLayerNorm, DType::kFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kShipped);
  EXPECT_EQ(choice->config, current_shipped);

  // Stale shipped too, and a current local entry elsewhere: the nearest.
  const Shape elsewhere{4096, 4096};
  const auto near = NonHeuristic(Op::kLayerNorm, DType::kFloat16, elsewhere);
  Import({Row(Op::kLayerNorm, DType::kFloat16, elsewhere, near, 6)});
  cache = MakeCache({Shipped(Row(Op::kLayerNorm, DType::kFloat16, shape, current_shipped, 12,
                                 kOlderKernels))});
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->stale().local, 1);
  EXPECT_EQ(cache->stale().shipped, 1);
  EXPECT_EQ(cache->stale().total(), 2);
  choice = cache->Lookup(Op::kLayerNorm, DType::kFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  if (kernels::ValidateConfig(Op::kLayerNorm, DType::kFloat16, shape, near, device_).ok()) {
    EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
    EXPECT_EQ(choice->tuned->shape, elsewhere);
  } else {
    EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
  }

  // Nothing current at all: the heuristic.
  Import({Row(Op::kLayerNorm, DType::kFloat16, elsewhere, near, 6, kOlderKernels)});
  ASSERT_TRUE(cache->ReloadIfChanged().ok());
  EXPECT_EQ(cache->stale().total(), 3);
  EXPECT_TRUE(cache->Entries().empty());
  choice = cache->Lookup(Op::kLayerNorm, DType::kFloat16, shape);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
  EXPECT_FALSE(choice->tuned.has_value());
  EXPECT_THAT(tuner::DescribeStale(cache->stale()),
              ::testing::HasSubstr("skipped 3 tuned entries (2 local, 1 shipped) measured with "
                                   "kernel library 0.1.0+k1 (current "));
}

TEST_F(ConfigCacheTest, NearestTriesLocalEntriesThenShippedOnesThenTheHeuristic) {
  // block_uncached configs are legal for any cols; warp ones only for short
  // rows.
  const auto anywhere = *kernels::ParseLaunchConfig("block_uncached/b512/p1/g32/r1/w0");
  auto narrow_configs =
      kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat32, {4096, 64}, device_);
  ASSERT_TRUE(narrow_configs.ok());
  const Shape query{4096, 4096};
  std::optional<kernels::LaunchConfig> narrow;
  for (const auto& config : *narrow_configs) {
    if (!kernels::ValidateConfig(Op::kSoftmax, DType::kFloat32, query, config, device_).ok()) {
      narrow = config;
      break;
    }
  }
  ASSERT_TRUE(narrow.has_value());
  // The local nearest is illegal at the query: the shipped nearest serves.
  Import({Row(Op::kSoftmax, DType::kFloat32, {4096, 64}, *narrow, 2)});
  auto cache = MakeCache({Shipped(Row(Op::kSoftmax, DType::kFloat32, {4096, 8192}, anywhere, 40))});
  ASSERT_NE(cache, nullptr);
  auto choice = cache->Lookup(Op::kSoftmax, DType::kFloat32, query);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
  EXPECT_EQ(choice->config, anywhere);
  EXPECT_EQ(choice->tuned->origin, EntryOrigin::kShipped);
  EXPECT_EQ(choice->tuned->shape, (Shape{4096, 8192}));

  // A legal local nearest comes before the shipped one, even as near.
  Import({Row(Op::kSoftmax, DType::kFloat32, {4096, 2048}, anywhere, 3)});
  ASSERT_TRUE(cache->ReloadIfChanged().ok());
  choice = cache->Lookup(Op::kSoftmax, DType::kFloat32, query);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->source, ConfigSource::kNearestTuned);
  EXPECT_EQ(choice->tuned->origin, EntryOrigin::kLocal);
  EXPECT_EQ(choice->tuned->shape, (Shape{4096, 2048}));

  // Another dtype has neither: the heuristic.
  choice = cache->Lookup(Op::kSoftmax, DType::kFloat16, query);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
}

// The store's path holding something SQLite cannot read.
void WriteGarbage(const std::string& path) {
  std::ofstream(path) << "this is not an sqlite file, not at all, not even close........";
}

// Renames a store with its -wal and -shm, those it has. A store is moved
// with them: SQLite reads a WAL left beside another file as that file's.
void MoveStore(const std::string& from, const std::string& to) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const int moved = std::rename((from + suffix).c_str(), (to + suffix).c_str());
    if (*suffix == '\0') ASSERT_EQ(moved, 0) << from;
  }
}

void RemoveStore(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}

TEST_F(ConfigCacheTest, AnUnreadableStoreServesTheShippedEntriesSaysWhyAndIsReadOnceItCanBe) {
  const Shape shape{64, 1024};
  const auto config = NonHeuristic(Op::kSoftmax, DType::kFloat16, shape);
  WriteGarbage(path_);
  // Not a reason to refuse the device: the shipped entries serve.
  auto cache = MakeCache({Shipped(Row(Op::kSoftmax, DType::kFloat16, shape, config, 9))});
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kShipped);
  EXPECT_THAT(cache->store_problem(),
              AllOf(HasSubstr("cannot read the tuning store " + path_),
                    HasSubstr("serving no tuned configs from it until it can be read")));
  EXPECT_FALSE(cache->ReloadIfChanged().ok());

  RemoveStore(path_);
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, config, 5)});
  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(cache->store_problem(), "");
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
}

TEST_F(ConfigCacheTest, ADeletedStoreKeepsItsConfigsServedUntilAStoreIsBack) {
  const Shape shape{64, 1024}, other{32, 512};
  Import({Row(Op::kSoftmax, DType::kFloat16, shape,
              NonHeuristic(Op::kSoftmax, DType::kFloat16, shape), 5)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  ASSERT_EQ(cache->local_entries(), 1);
  RemoveStore(path_);

  const absl::StatusOr<bool> gone = cache->ReloadIfChanged();
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
  EXPECT_THAT(cache->store_problem(),
              AllOf(HasSubstr(path_ + " is gone"), HasSubstr("still serving the 1 tuned configs")));

  // A new store at the path replaces what was served.
  Import({Row(Op::kLogSoftmax, DType::kFloat16, other,
              NonHeuristic(Op::kLogSoftmax, DType::kFloat16, other), 3)});
  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(cache->store_problem(), "");
  EXPECT_EQ(cache->Lookup(Op::kLogSoftmax, DType::kFloat16, other)->source, ConfigSource::kTuned);
  EXPECT_NE(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
}

TEST_F(ConfigCacheTest, AStoreReplacedByAnotherFileIsReloadedWhateverItsDataVersion) {
  const Shape shape{64, 1024}, other{32, 512};
  Import({Row(Op::kSoftmax, DType::kFloat16, shape,
              NonHeuristic(Op::kSoftmax, DType::kFloat16, shape), 5)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  // Made elsewhere with as many writes (the same data version), then
  // moved over the store, as a deployment ships a file.
  const std::string next = dir_.File("next.db");
  ImportInto(next, {Row(Op::kLogSoftmax, DType::kFloat16, other,
                        NonHeuristic(Op::kLogSoftmax, DType::kFloat16, other), 3)});
  RemoveStore(path_);
  MoveStore(next, path_);

  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(cache->Lookup(Op::kLogSoftmax, DType::kFloat16, other)->source, ConfigSource::kTuned);
  EXPECT_NE(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
}

TEST_F(ConfigCacheTest, AStoreDamagedWhileServedKeepsItsConfigsServedUntilItIsRepaired) {
  const Shape shape{64, 1024};
  const auto config = NonHeuristic(Op::kSoftmax, DType::kFloat16, shape);
  Import({Row(Op::kSoftmax, DType::kFloat16, shape, config, 5)});
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  const std::string garbage = dir_.File("garbage");
  WriteGarbage(garbage);
  const std::string good = dir_.File("good.db");
  MoveStore(path_, good);
  MoveStore(garbage, path_);

  EXPECT_FALSE(cache->ReloadIfChanged().ok());
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
  EXPECT_THAT(cache->store_problem(),
              AllOf(HasSubstr("cannot read the tuning store"),
                    HasSubstr("still serving the 1 tuned configs loaded from it before")));
  EXPECT_FALSE(cache->ReloadIfChanged().ok());  // and again, the same

  RemoveStore(path_);
  MoveStore(good, path_);
  auto reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(cache->store_problem(), "");
  EXPECT_EQ(cache->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source, ConfigSource::kTuned);
}

// What a cache recorded, as (op, rows, runs, source) for short expectations.
std::vector<std::tuple<Op, int64_t, int64_t, ConfigSource>> Served(const ConfigCache& cache) {
  std::vector<std::tuple<Op, int64_t, int64_t, ConfigSource>> out;
  for (const ServedShape& shape : cache.served_untuned().List()) {
    out.emplace_back(shape.key.op, shape.key.shape.rows, shape.runs, shape.source);
  }
  return out;
}

TEST_F(ConfigCacheTest, RunsServedUntunedAreRecordedAndThoseServedTheirEntryAreNot) {
  const Shape tuned{4096, 1024};
  const Shape shipped{2048, 1024};
  Import({Row(Op::kSoftmax, DType::kFloat16, tuned,
              NonHeuristic(Op::kSoftmax, DType::kFloat16, tuned), 10)});
  auto cache = MakeCache({Shipped(Row(Op::kSoftmax, DType::kFloat16, shipped,
                                      NonHeuristic(Op::kSoftmax, DType::kFloat16, shipped), 6))});
  ASSERT_NE(cache, nullptr);
  const absl::Time before = absl::Now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat16, tuned)->source,
              ConfigSource::kTuned);
    EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat16, shipped)->source,
              ConfigSource::kShipped);
    // The same thread again and again: the memo's path counts every Run.
    EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat16, {4000, 1024})->source,
              ConfigSource::kNearestTuned);
  }
  EXPECT_EQ(cache->LookupForRun(Op::kLayerNorm, DType::kFloat16, tuned)->source,
            ConfigSource::kHeuristic);
  // A question (GetConfig), not a Run: not recorded.
  EXPECT_EQ(cache->Lookup(Op::kRmsNorm, DType::kFloat16, tuned)->source,
            ConfigSource::kHeuristic);

  EXPECT_THAT(Served(*cache),
              ::testing::ElementsAre(
                  std::make_tuple(Op::kSoftmax, 4000, 3, ConfigSource::kNearestTuned),
                  std::make_tuple(Op::kLayerNorm, 4096, 1, ConfigSource::kHeuristic)));
  const ServedShape first = cache->served_untuned().List()[0];
  EXPECT_EQ(first.key.dtype, DType::kFloat16);
  EXPECT_EQ(first.key.shape, (Shape{4000, 1024, 1}));
  EXPECT_GE(first.last_seen, before);
  EXPECT_LE(first.first_seen, first.last_seen);
  EXPECT_LE(first.last_seen, absl::Now());
}

TEST_F(ConfigCacheTest, AProblemLeavesTheRecordOnceTheStoreHoldsItsEntry) {
  const Shape shape{4096, 1000};
  const Shape other{64, 1000};
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat32, shape)->source,
            ConfigSource::kHeuristic);
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat32, other)->source,
            ConfigSource::kHeuristic);
  ASSERT_EQ(Served(*cache).size(), 2u);

  // `kerntune tune --served` writes the first one; the cache reloads.
  Import({Row(Op::kSoftmax, DType::kFloat32, shape,
              NonHeuristic(Op::kSoftmax, DType::kFloat32, shape), 8)});
  ASSERT_TRUE(*cache->ReloadIfChanged());
  // The other one is now served the nearest entry: still recorded.
  EXPECT_THAT(Served(*cache), ::testing::ElementsAre(std::make_tuple(
                                  Op::kSoftmax, 64, 1, ConfigSource::kHeuristic)));
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat32, shape)->source,
            ConfigSource::kTuned);
  EXPECT_EQ(cache->LookupForRun(Op::kSoftmax, DType::kFloat32, other)->source,
            ConfigSource::kNearestTuned);
  EXPECT_THAT(Served(*cache), ::testing::ElementsAre(std::make_tuple(
                                  Op::kSoftmax, 64, 2, ConfigSource::kNearestTuned)));
  EXPECT_EQ(cache->served_untuned().evicted(), 0);
}

TEST_F(ConfigCacheTest, RunsOfSeveralThreadsAreCountedOnceEach) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  constexpr int kThreads = 4, kRuns = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&cache] {
      for (int i = 0; i < kRuns; ++i) {
        // Two problems in turn: every Run misses the thread's memo.
        cache->LookupForRun(Op::kSoftmax, DType::kFloat16, {128, 4096});
        cache->LookupForRun(Op::kLogSoftmax, DType::kFloat16, {128, 4096});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(Served(*cache),
              ::testing::ElementsAre(
                  std::make_tuple(Op::kSoftmax, 128, kThreads * kRuns, ConfigSource::kHeuristic),
                  std::make_tuple(Op::kLogSoftmax, 128, kThreads * kRuns,
                                  ConfigSource::kHeuristic)));
}

}  // namespace
}  // namespace kt::server
