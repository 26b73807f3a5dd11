// The tuning store on a read-only filesystem and on one that fills up,
// under the daemon's config cache and a writer (a tuner, an import): writes
// fail cleanly and leave the store whole, the cache serves what it has and
// says why it cannot read, and all is read once the filesystem is back. The filesystems are tmpfs
// mounts in a user and mount namespace of the test's own; where the kernel or the container refuses
// one, the test is skipped and says why.
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "db/tuning_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"
#include "server/config_cache.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

using kernels::DType;
using kernels::Op;
using ::testing::HasSubstr;
using tuner::ConfigSource;

absl::Status Errno(const std::string& what) { return absl::ErrnoToStatus(errno, what); }

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  return out ? absl::OkStatus() : Errno(absl::StrCat("writing ", path));
}

// Makes this process root of a new user namespace with its own mount
// namespace (or, without user namespaces, a mount namespace alone, which
// root with CAP_SYS_ADMIN may make), so that it may mount. The process must
// be single-threaded: each test of this binary runs in a process of its own.
absl::Status EnterMountNamespace() {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
    if (absl::Status s = WriteFile("/proc/self/setgroups", "deny"); !s.ok()) return s;
    if (absl::Status s = WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")); !s.ok()) {
      return s;
    }
    if (absl::Status s = WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1")); !s.ok()) {
      return s;
    }
  } else if (unshare(CLONE_NEWNS) != 0) {
    return Errno("unshare(CLONE_NEWUSER | CLONE_NEWNS), then unshare(CLONE_NEWNS)");
  }
  // Nothing mounted here reaches the rest of the system.
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Errno("making / private");
  }
  return absl::OkStatus();
}

db::BestConfig Row(Op op, int64_t rows, int64_t cols) {
  const kernels::DeviceInfo device = kernels::DescribedH100();
  const kernels::Shape shape{rows, cols};
  db::BestConfig row;
  row.point.op = std::string(kernels::OpName(op));
  row.point.dtype = "float16";
  row.point.rows = rows;
  row.point.cols = cols;
  row.config = tuner::ConfigRecordOf(*kernels::HeuristicConfig(op, DType::kFloat16, shape, device));
  row.median_us = 10;
  row.gbps = 1000;
  row.pct_of_copy = 50;
  row.heuristic_key = row.config.key;
  row.env.kernel_version = kernels::kKernelLibraryVersion;
  row.updated_at = 1700000000;
  return row;
}

// Writes `rows` into the store at `path` as an import does.
absl::Status Import(const std::string& path, const std::vector<db::BestConfig>& rows) {
  db::OpenOptions options;
  options.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, options);
  if (!store.ok()) return store.status();
  return (*store)->ImportBestConfigs(tuner::SkuOf(kernels::DescribedH100()), rows).status();
}

absl::Status CheckIntegrity(const std::string& path) {
  db::OpenOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, options);
  if (!store.ok()) return store.status();
  return (*store)->CheckIntegrity();
}

class StoreFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = EnterMountNamespace(); !s.ok()) {
      GTEST_SKIP() << "cannot mount a filesystem of the test's own here (" << s
                   << "): the kernel or the container refuses user and mount namespaces";
    }
    ASSERT_TRUE(std::filesystem::create_directory(mount_point_));
  }
  void TearDown() override {
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
  }

  void MountTmpfs(const std::string& size) {
    ASSERT_EQ(mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, ("size=" + size).c_str()), 0)
        << std::strerror(errno);
    mounted_ = true;
  }
  void Remount(bool read_only) {
    ASSERT_EQ(mount(nullptr, mount_point_.c_str(), nullptr,
                    MS_REMOUNT | (read_only ? MS_RDONLY : 0), nullptr),
              0)
        << std::strerror(errno);
  }
  std::unique_ptr<ConfigCache> MakeCache() {
    absl::StatusOr<std::unique_ptr<ConfigCache>> cache =
        ConfigCache::Create(path_, kernels::DescribedH100());
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }
  ConfigSource Source(const ConfigCache& cache, Op op, int64_t rows, int64_t cols) {
    return cache.Lookup(op, DType::kFloat16, {rows, cols})->source;
  }

  kt::testing::ScopedTempDir dir_;
  const std::string mount_point_ = dir_.File("fs");
  const std::string path_ = mount_point_ + "/tuning.db";
  bool mounted_ = false;
};

// (A filesystem cannot turn read-only under a daemon reading a store: the
// store's -shm file is open for writing, so the remount is refused.)
TEST_F(StoreFaultsTest, ReadOnlyFilesystem) {
  ASSERT_NO_FATAL_FAILURE(MountTmpfs("8m"));
  ASSERT_TRUE(Import(path_, {Row(Op::kSoftmax, 64, 1024)}).ok());
  ASSERT_NO_FATAL_FAILURE(Remount(/*read_only=*/true));

  // A writer is refused.
  EXPECT_FALSE(Import(path_, {Row(Op::kLayerNorm, 64, 1024)}).ok());
  // A daemon starting now cannot read the store (SQLite has no -shm file
  // to read it through and cannot make one): it serves without it and says
  // why.
  std::unique_ptr<ConfigCache> cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(Source(*cache, Op::kSoftmax, 64, 1024), ConfigSource::kHeuristic);
  EXPECT_THAT(cache->store_problem(), AllOf(HasSubstr("cannot read the tuning store " + path_),
                                            HasSubstr("its filesystem is read-only")));
  EXPECT_FALSE(cache->ReloadIfChanged().ok());

  // Writable again: read at the next poll, as the writer left it.
  ASSERT_NO_FATAL_FAILURE(Remount(/*read_only=*/false));
  absl::StatusOr<bool> reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(cache->store_problem(), "");
  EXPECT_EQ(Source(*cache, Op::kSoftmax, 64, 1024), ConfigSource::kTuned);
  EXPECT_NE(Source(*cache, Op::kLayerNorm, 64, 1024), ConfigSource::kTuned);
  EXPECT_TRUE(CheckIntegrity(path_).ok());
}

TEST_F(StoreFaultsTest, FullFilesystem) {
  ASSERT_NO_FATAL_FAILURE(MountTmpfs("1m"));
  ASSERT_TRUE(Import(path_, {Row(Op::kSoftmax, 64, 1024)}).ok());
  std::unique_ptr<ConfigCache> cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  ASSERT_EQ(Source(*cache, Op::kSoftmax, 64, 1024), ConfigSource::kTuned);

  // Every free block taken.
  const std::string filler = mount_point_ + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(4096, 'x');
    while (out.write(block.data(), block.size())) {
    }
  }
  // An import of many rows needs new pages: it fails whole.
  std::vector<db::BestConfig> rows;
  for (int64_t r = 1; r <= 2000; ++r) rows.push_back(Row(Op::kLayerNorm, r, 1024));
  const absl::Status full = Import(path_, rows);
  EXPECT_FALSE(full.ok());
  EXPECT_TRUE(CheckIntegrity(path_).ok());
  absl::StatusOr<bool> reloaded = cache->ReloadIfChanged();
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(cache->store_problem(), "");
  EXPECT_EQ(Source(*cache, Op::kSoftmax, 64, 1024), ConfigSource::kTuned);
  EXPECT_NE(Source(*cache, Op::kLayerNorm, 7, 1024), ConfigSource::kTuned);

  // Space again: the same import goes through and is served.
  std::filesystem::remove(filler);
  ASSERT_TRUE(Import(path_, rows).ok());
  reloaded = cache->ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(Source(*cache, Op::kLayerNorm, 7, 1024), ConfigSource::kTuned);
  EXPECT_TRUE(CheckIntegrity(path_).ok());
}

}  // namespace
}  // namespace kt::server
