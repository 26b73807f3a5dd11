// The in-process runtime's config choice on a described H100 (no GPU):
// the same choice as the daemon's ConfigCache for 1,000 random shapes per
// op, from the store and the shipped files and from a daemon's ListConfigs;
// a daemon that does not answer, serves another SKU or runs the CPU
// backend leaves the runtime on the store; a store written later is seen
// after a refresh. The host path runs the reference.
#include "client/runtime.h"

#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/reference.h"
#include "kernels/version.h"
#include "proto/config_file.h"
#include "proto/convert.h"
#include "server/config_cache.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tuned_row.h"
#include "tuner/backend.h"

namespace kt::client {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;
using kernels::DType;
using kernels::Op;
using kernels::Shape;
using tuner::ConfigSource;

db::BestConfig Row(Op op, DType dtype, Shape shape, const kernels::LaunchConfig& config,
                   const std::string& kernel_version = kernels::kKernelLibraryVersion) {
  return kt::testing::TunedRow(op, dtype, shape, config, 10, kernel_version);
}

// A daemon answering ListConfigs from a ConfigCache, as HandleListConfigs
// does; or failing, or serving another SKU.
class FakeDaemon final : public DaemonConfigSource {
 public:
  explicit FakeDaemon(const server::ConfigCache* cache) : cache_(cache) {}
  absl::StatusOr<pb::ListConfigsResponse> ListConfigs(absl::string_view device) override {
    ++calls;
    if (!answer.ok()) return answer;
    pb::ListConfigsResponse response;
    if (cache_ == nullptr) return response;  // the CPU backend
    *response.mutable_sku() = proto::SkuToProto(sku_override.value_or(cache_->sku()));
    for (const tuner::TunedEntry& entry : cache_->Entries()) {
      *response.add_entries() = proto::TunedEntryToProto(entry);
    }
    return response;
  }
  std::string target() const override { return "unix:/fake.sock"; }

  absl::Status answer;
  std::optional<db::GpuSku> sku_override;
  std::atomic<int> calls{0};

 private:
  const server::ConfigCache* cache_;
};

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 random(7);
    // Tuned rows at some of the points the parity test asks about, the
    // rest near them; shipped rows elsewhere and at some of the same points.
    for (Op op : kernels::kAllOps) {
      for (DType dtype : kernels::kAllDTypes) {
        for (int i = 0; i < 6; ++i) {
          Shape shape = RandomShape(op, random);
          auto configs = kernels::EnumerateConfigs(op, dtype, shape, device_);
          if (!configs.ok() || configs->empty()) continue;
          const auto& config = (*configs)[random() % configs->size()];
          (i % 3 == 2 ? shipped_ : local_).push_back(Row(op, dtype, shape, config));
          if (i == 1) shipped_.push_back(Row(op, dtype, shape, (*configs)[0]));
        }
      }
    }
    // One stale row of each kind: never served by either.
    const Shape stale_shape{512, 4096};
    const auto stale =
        *kernels::HeuristicConfig(Op::kRmsNorm, DType::kBFloat16, stale_shape, device_);
    local_.push_back(Row(Op::kRmsNorm, DType::kBFloat16, stale_shape, stale, "0.1.0+k1"));
    shipped_.push_back(Row(Op::kRmsNorm, DType::kBFloat16, stale_shape, stale, "0.1.0+k1"));

    Import(local_);
    auto file = proto::MakeConfigFile(tuner::SkuOf(device_), shipped_, absl::Now());
    ASSERT_TRUE(file.ok()) << file.status();
    auto json = proto::ConfigFileToJson(*file);
    ASSERT_TRUE(json.ok());
    ASSERT_EQ(mkdir(configs_dir_.c_str(), 0755), 0);
    std::ofstream(configs_dir_ + "/h100.json") << *json;

    const proto::ShippedEntries shipped = proto::ShippedEntriesFor(
        proto::ReadShippedConfigs(configs_dir_), tuner::SkuOf(device_));
    ASSERT_FALSE(shipped.entries.empty());
    auto cache = server::ConfigCache::Create(db_path_, device_, shipped.entries);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
  }

  void Import(const std::vector<db::BestConfig>& rows) {
    db::OpenOptions options;
    options.create_if_missing = true;
    auto store = db::TuningStore::Open(db_path_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->ImportBestConfigs(tuner::SkuOf(device_), rows).ok());
  }

  static Shape RandomShape(Op op, std::mt19937& random) {
    std::uniform_int_distribution<int> log_rows(0, 14), log_cols(0, 17);
    Shape shape{int64_t{1} << log_rows(random), int64_t{1} << log_cols(random), 1};
    // Odd sizes too: the nearest search must cross them.
    if (random() % 3 == 0) shape.cols += random() % 97;
    if (random() % 4 == 0) shape.rows += random() % 13;
    if (kernels::SupportsInnerAxis(op) && random() % 5 == 0) shape.inner = 1 + random() % 64;
    return shape;
  }

  std::unique_ptr<Runtime> MakeRuntime(std::unique_ptr<DaemonConfigSource> daemon = nullptr) {
    RuntimeOptions options;
    options.daemon_target = "none";
    options.db_path = db_path_;
    options.shipped_config_dir = configs_dir_;
    options.refresh_interval = absl::ZeroDuration();
    auto runtime = Runtime::CreateWithDaemon(options, std::move(daemon));
    EXPECT_TRUE(runtime.ok()) << runtime.status();
    return runtime.ok() ? *std::move(runtime) : nullptr;
  }

  // The runtime chooses as the daemon's cache does at 1,000 random shapes
  // of every op and dtype, and at every tuned point; some choices are
  // tuned, shipped and nearest, not all heuristic.
  void ExpectSameChoices(Runtime& runtime) {
    std::mt19937 random(11);
    std::map<ConfigSource, int> sources;
    auto check = [&](Op op, DType dtype, Shape shape) {
      auto daemon = cache_->Lookup(op, dtype, shape);
      auto ours = runtime.Choose(op, dtype, shape, device_);
      ASSERT_EQ(daemon.ok(), ours.ok()) << kernels::OpName(op) << " " << shape.rows << "x"
                                        << shape.cols << "x" << shape.inner;
      if (!daemon.ok()) return;
      EXPECT_EQ(ours->config, daemon->config)
          << kernels::OpName(op) << " " << kernels::DTypeName(dtype) << " " << shape.rows
          << "x" << shape.cols << "x" << shape.inner;
      EXPECT_EQ(ours->source, daemon->source);
      ++sources[ours->source];
    };
    for (Op op : kernels::kAllOps) {
      for (int i = 0; i < 1000; ++i) {
        check(op, kernels::kAllDTypes[i % 3], RandomShape(op, random));
      }
    }
    for (const auto* rows : {&local_, &shipped_}) {
      for (const db::BestConfig& row : *rows) {
        check(*kernels::ParseOp(row.point.op), *kernels::ParseDType(row.point.dtype),
              {row.point.rows, row.point.cols, row.point.inner});
      }
    }
    EXPECT_GT(sources[ConfigSource::kTuned], 0);
    EXPECT_GT(sources[ConfigSource::kShipped], 0);
    EXPECT_GT(sources[ConfigSource::kNearestTuned], 0);
    EXPECT_GT(sources[ConfigSource::kHeuristic], 0);
  }

  kt::testing::ScopedTempDir dir_;
  const std::string db_path_ = dir_.File("tuning.db");
  const std::string configs_dir_ = dir_.File("configs");
  const kernels::DeviceInfo device_ = kernels::DescribedH100();
  std::vector<db::BestConfig> local_, shipped_;
  std::unique_ptr<server::ConfigCache> cache_;
};

TEST_F(RuntimeTest, StoreAndShippedFilesChooseAsTheDaemon) {
  auto runtime = MakeRuntime();
  ASSERT_NE(runtime, nullptr);
  ExpectSameChoices(*runtime);
  auto configs = runtime->ConfigsFor(device_);
  EXPECT_THAT(configs->origin, HasSubstr("store " + db_path_));
  EXPECT_THAT(configs->problem, HasSubstr("skipped 2 tuned entries"));
}

TEST_F(RuntimeTest, DaemonConfigsChooseAsTheDaemon) {
  // An empty store and no shipped files here: every entry is the daemon's.
  auto daemon = std::make_unique<FakeDaemon>(cache_.get());
  FakeDaemon* fake = daemon.get();
  RuntimeOptions options;
  options.daemon_target = "none";
  options.db_path = dir_.File("absent.db");
  options.shipped_config_dir = dir_.File("no-configs");
  options.refresh_interval = absl::ZeroDuration();
  auto runtime = Runtime::CreateWithDaemon(options, std::move(daemon));
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  ExpectSameChoices(**runtime);
  EXPECT_EQ(fake->calls, 1);  // one ListConfigs for the SKU
  EXPECT_THAT((*runtime)->ConfigsFor(device_)->origin, HasSubstr("daemon unix:/fake.sock"));
}

TEST_F(RuntimeTest, DaemonThatCannotServeLeavesTheStore) {
  struct Case {
    std::string name;
    std::function<void(FakeDaemon&)> set;
    std::string problem;
  };
  db::GpuSku other = tuner::SkuOf(device_);
  other.name = "NVIDIA H200";
  const std::vector<Case> cases = {
      {"down", [](FakeDaemon& d) { d.answer = absl::UnavailableError("connection refused"); },
       "did not answer (connection refused)"},
      {"other sku", [&](FakeDaemon& d) { d.sku_override = other; },
       "serves another GPU model (NVIDIA H200)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto daemon = std::make_unique<FakeDaemon>(cache_.get());
    c.set(*daemon);
    auto runtime = MakeRuntime(std::move(daemon));
    ASSERT_NE(runtime, nullptr);
    ExpectSameChoices(*runtime);
    EXPECT_THAT(runtime->ConfigsFor(device_)->problem, HasSubstr(c.problem));
  }
  auto cpu_daemon = MakeRuntime(std::make_unique<FakeDaemon>(nullptr));
  ASSERT_NE(cpu_daemon, nullptr);
  EXPECT_THAT(cpu_daemon->ConfigsFor(device_)->problem, HasSubstr("runs the CPU backend"));
  EXPECT_THAT(cpu_daemon->ConfigsFor(device_)->origin, HasSubstr("store"));
}

TEST_F(RuntimeTest, RefreshSeesTheStoreWrittenSince) {
  auto runtime = MakeRuntime();
  ASSERT_NE(runtime, nullptr);
  const Shape shape{3000, 7000};
  auto before = runtime->Choose(Op::kLayerNorm, DType::kFloat16, shape, device_);
  ASSERT_TRUE(before.ok());
  ASSERT_NE(before->source, ConfigSource::kTuned);
  auto configs = kernels::EnumerateConfigs(Op::kLayerNorm, DType::kFloat16, shape, device_);
  ASSERT_TRUE(configs.ok() && configs->size() > 1);
  const auto tuned = configs->back();
  Import({Row(Op::kLayerNorm, DType::kFloat16, shape, tuned)});
  // The choice made is kept until the configs are fetched again.
  EXPECT_EQ(runtime->Choose(Op::kLayerNorm, DType::kFloat16, shape, device_)->source,
            before->source);
  runtime->Refresh();
  auto after = runtime->Choose(Op::kLayerNorm, DType::kFloat16, shape, device_);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->source, ConfigSource::kTuned);
  EXPECT_EQ(after->config, tuned);
}

TEST_F(RuntimeTest, BackgroundRefreshFetchesAgain) {
  auto daemon = std::make_unique<FakeDaemon>(cache_.get());
  FakeDaemon* fake = daemon.get();
  RuntimeOptions options;
  options.daemon_target = "none";
  options.db_path = db_path_;
  options.shipped_config_dir = configs_dir_;
  options.refresh_interval = absl::Milliseconds(20);
  auto runtime = Runtime::CreateWithDaemon(options, std::move(daemon));
  ASSERT_TRUE(runtime.ok());
  ASSERT_TRUE((*runtime)->Choose(Op::kSoftmax, DType::kFloat32, {8, 1000}, device_).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (fake->calls < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(fake->calls, 3);
  runtime->reset();  // joins the refresher
}

TEST_F(RuntimeTest, HostRunIsTheReference) {
  auto runtime = MakeRuntime();
  ASSERT_NE(runtime, nullptr);
  const Shape shape{3, 5};
  std::vector<float> x = {1, 2, 3, 4, 5, -1, 0, 1, 2, 3, 9, 9, 9, 9, 9};
  std::vector<float> y(15), expected(15);
  kernels::RowOpArgs args;
  args.x = x.data();
  args.y = y.data();
  ASSERT_TRUE(runtime->RunOnHost(Op::kSoftmax, DType::kFloat32, shape, args).ok());
  args.y = expected.data();
  ASSERT_TRUE(kernels::RunReference(Op::kSoftmax, DType::kFloat32, shape, args, 0, 3,
                                    DType::kFloat32).ok());
  EXPECT_EQ(y, expected);
  args.y = nullptr;
  EXPECT_FALSE(runtime->RunOnHost(Op::kSoftmax, DType::kFloat32, shape, args).ok());
}

TEST(RuntimeOptionsTest, BadTargetAndIntervalAreRefused) {
  RuntimeOptions options;
  options.daemon_target = "foo";
  EXPECT_FALSE(Runtime::Create(options).ok());
  options.daemon_target = "none";
  options.refresh_interval = absl::Seconds(-1);
  EXPECT_FALSE(Runtime::Create(options).ok());
}

}  // namespace
}  // namespace kt::client
