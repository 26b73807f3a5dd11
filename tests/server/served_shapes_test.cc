// ServedShapes: counts, first and last seen, the source of the last Run; a
// full table evicting its least recently seen problems; pruning of tuned
// problems and refusal of Runs looked up in an older table; merging of
// several devices' lists; counting from several threads.
#include "server/served_shapes.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kt::server {
namespace {

using kernels::DType;
using kernels::Op;
using tuner::ConfigSource;

absl::Time At(int64_t seconds) { return absl::FromUnixSeconds(1700000000 + seconds); }

ServedKey Key(int64_t rows, int64_t cols = 1024, Op op = Op::kSoftmax) {
  return {op, DType::kFloat16, {rows, cols, 1}};
}

TEST(ServedShapesTest, CountsRunsWithFirstAndLastSeenAndTheLastSource) {
  ServedShapes shapes;
  std::shared_ptr<ServedShapes::Slot> slot = shapes.Find(Key(4096), 1);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(shapes.Find(Key(4096), 1), slot);  // one slot per problem
  slot->Count(ConfigSource::kNearestTuned, At(10));
  slot->Count(ConfigSource::kNearestTuned, At(20));
  slot->Count(ConfigSource::kHeuristic, At(30));
  shapes.Find(Key(8), 1)->Count(ConfigSource::kHeuristic, At(15));
  shapes.Find(Key(16), 1);  // found, never counted: not listed

  const std::vector<ServedShape> list = shapes.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].key, Key(4096));  // most Runs first
  EXPECT_EQ(list[0].runs, 3);
  EXPECT_EQ(list[0].last_seen, At(30));
  EXPECT_LE(list[0].first_seen, absl::Now());
  EXPECT_EQ(list[0].source, ConfigSource::kHeuristic);
  EXPECT_EQ(list[1].key, Key(8));
  EXPECT_EQ(list[1].runs, 1);
  EXPECT_EQ(list[1].last_seen, At(15));
  EXPECT_EQ(shapes.evicted(), 0);
}

TEST(ServedShapesTest, AFullTableEvictsItsLeastRecentlySeenEighth) {
  ServedShapes shapes(16);
  std::vector<std::shared_ptr<ServedShapes::Slot>> slots;
  for (int i = 0; i < 16; ++i) {
    slots.push_back(shapes.Find(Key(i + 1), 1));
    slots.back()->Count(ConfigSource::kHeuristic, At(100 + i));
  }
  // The two oldest would be rows 1 and 2; row 1 is served again.
  slots[0]->Count(ConfigSource::kHeuristic, At(200));
  shapes.Find(Key(1000), 1)->Count(ConfigSource::kHeuristic, At(300));

  EXPECT_EQ(shapes.evicted(), 2);  // 16 / 8
  std::vector<int64_t> rows;
  for (const ServedShape& shape : shapes.List()) rows.push_back(shape.key.shape.rows);
  EXPECT_EQ(rows.size(), 15u);
  EXPECT_NE(std::find(rows.begin(), rows.end(), 1), rows.end());
  EXPECT_NE(std::find(rows.begin(), rows.end(), 1000), rows.end());
  EXPECT_EQ(std::find(rows.begin(), rows.end(), 2), rows.end());
  EXPECT_EQ(std::find(rows.begin(), rows.end(), 3), rows.end());
  // A Run that still holds an evicted slot knows to ask again.
  EXPECT_TRUE(slots[1]->dropped());
  EXPECT_FALSE(slots[0]->dropped());
  std::shared_ptr<ServedShapes::Slot> again = shapes.Find(Key(2), 1);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again, slots[1]);
}

TEST(ServedShapesTest, PruneDropsTunedProblemsAndRefusesOlderGenerations) {
  ServedShapes shapes;
  std::shared_ptr<ServedShapes::Slot> tuned = shapes.Find(Key(4096), 1);
  tuned->Count(ConfigSource::kHeuristic, At(1));
  shapes.Find(Key(8), 1)->Count(ConfigSource::kHeuristic, At(1));

  shapes.Prune([](const ServedKey& key) { return key == Key(4096); }, 2);
  ASSERT_EQ(shapes.List().size(), 1u);
  EXPECT_EQ(shapes.List()[0].key, Key(8));
  EXPECT_TRUE(tuned->dropped());
  // A Run looked up in the table before the reload records nothing; one of
  // the new table does.
  EXPECT_EQ(shapes.Find(Key(4096), 1), nullptr);
  EXPECT_EQ(shapes.Find(Key(32), 1), nullptr);
  EXPECT_NE(shapes.Find(Key(32), 2), nullptr);
  EXPECT_EQ(shapes.evicted(), 0);  // tuned is not evicted
}

TEST(ServedShapesTest, MergeSumsOneProblemOverDevices) {
  const std::vector<ServedShape> merged = MergeServedShapes({
      {Key(8), 2, At(5), At(50), ConfigSource::kNearestTuned},
      {Key(4096), 1, At(1), At(1), ConfigSource::kHeuristic},
      {Key(8), 3, At(2), At(40), ConfigSource::kHeuristic},
  });
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].key, Key(8));
  EXPECT_EQ(merged[0].runs, 5);
  EXPECT_EQ(merged[0].first_seen, At(2));
  EXPECT_EQ(merged[0].last_seen, At(50));
  EXPECT_EQ(merged[0].source, ConfigSource::kNearestTuned);  // the latest Run's
  EXPECT_EQ(merged[1].key, Key(4096));
}

TEST(ServedShapesTest, RunsOfSeveralThreadsAreAllCounted) {
  ServedShapes shapes;
  constexpr int kThreads = 4, kRuns = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&shapes, t] {
      // Each thread finds the shared problem once, as a thread's memo
      // does, and adds one of its own.
      std::shared_ptr<ServedShapes::Slot> shared = shapes.Find(Key(1), 1);
      shapes.Find(Key(100 + t), 1)->Count(ConfigSource::kHeuristic, At(0));
      for (int i = 0; i < kRuns; ++i) shared->Count(ConfigSource::kHeuristic, At(i));
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<ServedShape> list = shapes.List();
  ASSERT_EQ(list.size(), 1u + kThreads);
  EXPECT_EQ(list[0].key, Key(1));
  EXPECT_EQ(list[0].runs, kThreads * kRuns);
}

}  // namespace
}  // namespace kt::server
