// The buffer registry: ownership, leases, reaping and limits.
#include "server/buffer_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ipc_cache.h"
#include "tests/server/fake_memory.h"

namespace kt::server {
namespace {

using ::kt::server::testing::FakeMemory;
using ::testing::HasSubstr;

const PeerProcess kAlice{100, 1000, 1000, 5};
const PeerProcess kBob{200, 1001, 1001, 6};
const PeerProcess kAliceReborn{100, 1000, 1000, 9};  // same pid, a later process
const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(BufferRegistryTest, IdsAreLongRandomHex) {
  const std::string a = NewBufferId();
  const std::string b = NewBufferId();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(BufferRegistryTest, OnlyTheOwnerSeesUsesAndUnregisters) {
  BufferRegistry registry{RegistryLimits{}};
  auto memory = FakeMemory::Make(4096);
  absl::StatusOr<Registration> registered = registry.Register(
      kAlice, BufferKind::kHostShm, memory, 1024, absl::ZeroDuration(), "x", kT0);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->size_bytes, 1024);
  EXPECT_EQ(registered->ttl, absl::Hours(1));

  EXPECT_TRUE(registry.Use(kAlice, registered->id, kT0).ok());
  for (const PeerProcess& other : {kBob, kAliceReborn}) {
    absl::StatusOr<BufferRegistry::InUse> used = registry.Use(other, registered->id, kT0);
    EXPECT_EQ(used.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(registry.Unregister(other, registered->id).code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE(registry.List(other).empty());
  }
  // Unknown and foreign ids read alike.
  EXPECT_EQ(registry.Use(kBob, "0123", kT0).status().message(),
            "buffer_id \"0123\" is not registered by this process");
  ASSERT_EQ(registry.List(kAlice).size(), 1u);
  EXPECT_EQ(registry.List(kAlice)[0].runs, 1);
  EXPECT_TRUE(registry.Unregister(kAlice, registered->id).ok());
  EXPECT_EQ(registry.Use(kAlice, registered->id, kT0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.totals().buffers, 0);
}

TEST(BufferRegistryTest, SizeMustFitTheAllocationAndTtlItsBounds) {
  BufferRegistry registry{RegistryLimits{}};
  auto memory = FakeMemory::Make(100);
  EXPECT_EQ(registry.Register(kAlice, BufferKind::kHostShm, memory, 101, absl::ZeroDuration(),
                              "", kT0)
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::Hours(24 * 8), "",
                              kT0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Registration> whole =
      registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(), "", kT0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size_bytes, 100);
}

TEST(BufferRegistryTest, IdleLeasesExpireAndUseRenewsThem) {
  BufferRegistry registry{RegistryLimits{}};
  auto memory = FakeMemory::Make(64);
  auto a = registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::Seconds(10), "", kT0);
  auto b = registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::Seconds(10), "", kT0);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(registry.Use(kAlice, b->id, kT0 + absl::Seconds(8)).ok());
  auto alive = [](const PeerProcess&) { return true; };
  BufferRegistry::Reaped reaped = registry.Reap(kT0 + absl::Seconds(11), alive);
  EXPECT_EQ(reaped.expired, 1);
  EXPECT_EQ(registry.Use(kAlice, a->id, kT0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Use(kAlice, b->id, kT0 + absl::Seconds(11)).ok());
}

TEST(BufferRegistryTest, ExitedOwnersLoseEverythingAndTheMemoryCloses) {
  BufferRegistry registry{RegistryLimits{}};
  std::weak_ptr<const ClientMemory> watch;
  {
    auto memory = FakeMemory::Make(64);
    watch = memory;
    ASSERT_TRUE(registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(),
                                  "", kT0).ok());
    ASSERT_TRUE(registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(),
                                  "", kT0).ok());
  }
  ASSERT_TRUE(registry.Register(kBob, BufferKind::kHostShm, FakeMemory::Make(8), 0,
                                absl::ZeroDuration(), "", kT0).ok());
  EXPECT_EQ(registry.totals().owners, 2);
  BufferRegistry::Reaped reaped =
      registry.Reap(kT0, [](const PeerProcess& p) { return !(p == kAlice); });
  EXPECT_EQ(reaped.owner_exited, 2);
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(registry.totals().buffers, 1);
}

TEST(BufferRegistryTest, PerOwnerLimit) {
  RegistryLimits limits;
  limits.max_buffers_per_owner = 2;
  BufferRegistry registry{limits};
  auto memory = FakeMemory::Make(8);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(),
                                  "", kT0).ok());
  }
  absl::StatusOr<Registration> third =
      registry.Register(kAlice, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(), "", kT0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(registry.Register(kBob, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(), "",
                                kT0).ok());
}

// Issue 43: 16 owners under the per-owner limit took the daemon past
// vm.max_map_count. The daemon-wide limit counts every registration, the
// same memory registered again included.
TEST(BufferRegistryTest, DaemonWideLimitCountsEveryOwnersRegistrationsAndAliases) {
  RegistryLimits limits;
  limits.max_buffers = 3;
  BufferRegistry registry{limits};
  auto memory = FakeMemory::Make(8);
  ASSERT_TRUE(registry.Admits(kAlice).ok());
  for (const PeerProcess& owner : {kAlice, kAlice, kBob}) {
    ASSERT_TRUE(registry.Register(owner, BufferKind::kHostShm, memory, 0, absl::ZeroDuration(),
                                  "", kT0).ok());
  }
  for (const PeerProcess& owner : {kAlice, kBob, kAliceReborn}) {
    const absl::Status admits = registry.Admits(owner);
    EXPECT_EQ(admits.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(admits.message()),
                HasSubstr("kerntuned holds 3 registered buffers, its limit (--max_buffers=3"));
    absl::StatusOr<Registration> refused = registry.Register(
        owner, BufferKind::kHostShm, FakeMemory::Make(8), 0, absl::ZeroDuration(), "", kT0);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(registry.totals().buffers, 3);
  ASSERT_TRUE(registry.Unregister(kBob, registry.List(kBob)[0].id).ok());
  EXPECT_TRUE(registry.Admits(kAliceReborn).ok());
}

TEST(IpcCacheTest, OpensNothingPastItsLimit) {
  IpcCache<const ClientMemory> cache(2);
  int opened = 0;
  auto open = [&]() -> absl::StatusOr<std::shared_ptr<const ClientMemory>> {
    ++opened;
    return FakeMemory::Make(16, MemorySpace::kDevice);
  };
  ASSERT_TRUE(cache.GetOrOpen("handle-1", kAlice, kT0, open).ok());
  ASSERT_TRUE(cache.GetOrOpen("handle-2", kBob, kT0, open).ok());
  auto refused = cache.GetOrOpen("handle-3", kAlice, kT0, open);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("holds 2 opened CUDA IPC handles, its limit"));
  EXPECT_EQ(opened, 2);
  // An open handle is still served; one closes, and there is room again.
  EXPECT_TRUE(cache.GetOrOpen("handle-1", kBob, kT0, open).ok());
  EXPECT_EQ(cache.Evict(kT0, absl::Seconds(60), [](const PeerProcess&) { return false; }), 2);
  EXPECT_TRUE(cache.GetOrOpen("handle-3", kAlice, kT0, open).ok());
}

TEST(IpcCacheTest, OpensOnceSharesAndEvictsWhenIdleOrOrphaned) {
  IpcCache<const ClientMemory> cache;
  int opened = 0;
  auto open = [&]() -> absl::StatusOr<std::shared_ptr<const ClientMemory>> {
    ++opened;
    return FakeMemory::Make(16, MemorySpace::kDevice);
  };
  auto a = cache.GetOrOpen("handle-1", kAlice, kT0, open);
  auto b = cache.GetOrOpen("handle-1", kBob, kT0, open);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(a->get(), b->get());
  auto alive = [](const PeerProcess&) { return true; };
  // Held elsewhere (a registration, a Run): never evicted.
  EXPECT_EQ(cache.Evict(kT0 + absl::Hours(1), absl::Seconds(60), alive), 0);
  a->reset();
  b->reset();
  EXPECT_EQ(cache.Evict(kT0 + absl::Seconds(30), absl::Seconds(60), alive), 0);
  EXPECT_EQ(cache.Evict(kT0 + absl::Seconds(61), absl::Seconds(60), alive), 1);
  EXPECT_EQ(cache.size(), 0u);

  ASSERT_TRUE(cache.GetOrOpen("handle-2", kAlice, kT0, open).ok());
  EXPECT_EQ(cache.Evict(kT0, absl::Seconds(60), [](const PeerProcess&) { return false; }), 1);

  auto failing = []() -> absl::StatusOr<std::shared_ptr<const ClientMemory>> {
    return absl::InvalidArgumentError("bad handle");
  };
  EXPECT_THAT(std::string(cache.GetOrOpen("handle-3", kAlice, kT0, failing).status().message()),
              HasSubstr("bad handle"));
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace kt::server
