// Tests of the RAII SQLite layer: the status mapping, statements and the
// transaction guard, on a real file.
#include "db/sqlite.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/db/test_util.h"

namespace kt::db {
namespace {

using ::kt::db::testing::ScopedTempDir;

TEST(SqliteStatusTest, MapsResultCodes) {
  EXPECT_TRUE(SqliteStatus(SQLITE_OK, "x").ok());
  EXPECT_TRUE(SqliteStatus(SQLITE_ROW, "x").ok());
  EXPECT_TRUE(SqliteStatus(SQLITE_DONE, "x").ok());
  EXPECT_TRUE(absl::IsUnavailable(SqliteStatus(SQLITE_BUSY, "x")));
  EXPECT_TRUE(absl::IsUnavailable(SqliteStatus(SQLITE_BUSY_SNAPSHOT, "x")));
  EXPECT_TRUE(absl::IsUnavailable(SqliteStatus(SQLITE_LOCKED, "x")));
  EXPECT_TRUE(absl::IsDataLoss(SqliteStatus(SQLITE_CORRUPT, "x")));
  EXPECT_TRUE(absl::IsDataLoss(SqliteStatus(SQLITE_NOTADB, "x")));
  EXPECT_TRUE(absl::IsAlreadyExists(SqliteStatus(SQLITE_CONSTRAINT, "x")));
  EXPECT_TRUE(
      absl::IsAlreadyExists(SqliteStatus(SQLITE_CONSTRAINT_UNIQUE, "x")));
  EXPECT_TRUE(
      absl::IsAlreadyExists(SqliteStatus(SQLITE_CONSTRAINT_PRIMARYKEY, "x")));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      SqliteStatus(SQLITE_CONSTRAINT_FOREIGNKEY, "x")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SqliteStatus(SQLITE_CONSTRAINT_CHECK, "x")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SqliteStatus(SQLITE_CONSTRAINT_NOTNULL, "x")));
  EXPECT_TRUE(absl::IsPermissionDenied(SqliteStatus(SQLITE_READONLY, "x")));
  EXPECT_TRUE(absl::IsNotFound(SqliteStatus(SQLITE_CANTOPEN, "x")));
  EXPECT_TRUE(absl::IsResourceExhausted(SqliteStatus(SQLITE_FULL, "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(SqliteStatus(SQLITE_RANGE, "x")));
  EXPECT_TRUE(absl::IsCancelled(SqliteStatus(SQLITE_INTERRUPT, "x")));
  EXPECT_TRUE(absl::IsInternal(SqliteStatus(SQLITE_ERROR, "x")));
  EXPECT_EQ(SqliteStatus(SQLITE_BUSY, "what happened").message(),
            "what happened");
}

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Connection> db = Connection::Open(
        dir_.File("t.db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok()) << db.status();
    db_.emplace(*std::move(db));
    ASSERT_TRUE(db_->Exec("CREATE TABLE t (i INTEGER UNIQUE, r REAL, s TEXT)")
                    .ok());
  }

  int64_t CountRows() {
    absl::StatusOr<Statement> count = db_->Prepare("SELECT COUNT(*) FROM t");
    EXPECT_TRUE(count.ok()) << count.status();
    EXPECT_TRUE(*count->Step());
    return count->ColumnInt64(0);
  }

  ScopedTempDir dir_;
  std::optional<Connection> db_;
};

TEST_F(SqliteTest, BindsAndReadsEveryType) {
  absl::StatusOr<Statement> insert =
      db_->Prepare("INSERT INTO t (i, r, s) VALUES (?, ?, ?)");
  ASSERT_TRUE(insert.ok()) << insert.status();
  ASSERT_TRUE(insert->BindAll(int64_t{1} << 40, 2.5, "text").Run().ok());
  insert->Reset();
  ASSERT_TRUE(insert
                  ->BindAll(true, std::optional<double>(),
                            std::optional<std::string>("opt"))
                  .Run()
                  .ok());

  absl::StatusOr<Statement> select =
      db_->Prepare("SELECT i, r, s FROM t ORDER BY i DESC");
  ASSERT_TRUE(select.ok()) << select.status();
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnInt64(0), int64_t{1} << 40);
  EXPECT_EQ(select->ColumnOptionalDouble(1), 2.5);
  EXPECT_EQ(select->ColumnText(2), "text");
  ASSERT_TRUE(*select->Step());
  EXPECT_TRUE(select->ColumnBool(0));
  EXPECT_TRUE(select->ColumnIsNull(1));
  EXPECT_EQ(select->ColumnOptionalDouble(1), std::nullopt);
  EXPECT_EQ(select->ColumnText(2), "opt");
  EXPECT_FALSE(*select->Step());
}

TEST_F(SqliteTest, BindErrorSurfacesAtStep) {
  absl::StatusOr<Statement> insert = db_->Prepare("INSERT INTO t (i) VALUES (?)");
  ASSERT_TRUE(insert.ok());
  absl::Status status = insert->BindAll(1, 2).Run();  // one parameter too many
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(CountRows(), 0);
}

TEST_F(SqliteTest, ErrorsNameTheFileAndMapTheCode) {
  absl::StatusOr<Statement> bad = db_->Prepare("SELEC nonsense");
  EXPECT_TRUE(absl::IsInternal(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find(dir_.File("t.db")),
            absl::string_view::npos);

  ASSERT_TRUE(db_->Exec("INSERT INTO t (i) VALUES (7)").ok());
  absl::Status duplicate = db_->Exec("INSERT INTO t (i) VALUES (7)");
  EXPECT_TRUE(absl::IsAlreadyExists(duplicate)) << duplicate;
}

TEST_F(SqliteTest, TransactionRollsBackUnlessCommitted) {
  {
    absl::StatusOr<Transaction> txn =
        Transaction::Begin(*db_, Transaction::Mode::kImmediate);
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(db_->Exec("INSERT INTO t (i) VALUES (1)").ok());
  }
  EXPECT_EQ(CountRows(), 0);
  EXPECT_TRUE(db_->InAutocommit());
  {
    absl::StatusOr<Transaction> txn =
        Transaction::Begin(*db_, Transaction::Mode::kDeferred);
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(db_->Exec("INSERT INTO t (i) VALUES (2)").ok());
    ASSERT_TRUE(txn->Commit().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(txn->Commit()));
  }
  EXPECT_EQ(CountRows(), 1);
}

}  // namespace
}  // namespace kt::db
