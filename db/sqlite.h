// Thin RAII layer over the SQLite C API: a connection, prepared statements, a
// transaction guard, and the one function that maps SQLite result codes to
// absl::Status. Nothing here knows the kerntune schema.
#ifndef KERNTUNE_DB_SQLITE_H_
#define KERNTUNE_DB_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::db {

// The one place SQLite result codes become absl::Status codes (extended
// codes are understood; `message` is used as given):
//   BUSY, LOCKED                    -> Unavailable (retry later)
//   CORRUPT, NOTADB                 -> DataLoss
//   CONSTRAINT (UNIQUE, PRIMARYKEY) -> AlreadyExists
//   CONSTRAINT_FOREIGNKEY           -> FailedPrecondition (parent row missing)
//   CONSTRAINT_CHECK, _NOTNULL      -> InvalidArgument
//   READONLY, PERM, AUTH            -> PermissionDenied
//   CANTOPEN                        -> NotFound
//   FULL, NOMEM                     -> ResourceExhausted
//   MISMATCH, RANGE, TOOBIG         -> InvalidArgument
//   INTERRUPT -> Cancelled; ABORT, SCHEMA -> Aborted; everything else Internal.
// SQLITE_OK, SQLITE_ROW and SQLITE_DONE map to OK.
absl::Status SqliteStatus(int code, absl::string_view message);

class Statement;

// One open sqlite3 handle, closed on destruction. Movable, not copyable.
// Not for sharing between threads or across fork(): open one per process.
class Connection {
 public:
  // `flags` are sqlite3_open_v2 flags (SQLITE_OPEN_READONLY, ...). Fails
  // with the mapped status when SQLite cannot open the file.
  static absl::StatusOr<Connection> Open(const std::string& path, int flags);

  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Runs one or more statements without parameters (DDL, PRAGMAs).
  absl::Status Exec(const char* sql);
  // Compiles one statement; `sql` must outlive the statement.
  absl::StatusOr<Statement> Prepare(const char* sql);

  // The status for SQLite result `code` while doing `what`, naming the file
  // and quoting SQLite's own message.
  absl::Status Error(int code, absl::string_view what) const;

  // Rows changed by every INSERT/UPDATE/DELETE so far on this connection.
  int64_t TotalChanges() const;
  // True outside an explicit transaction.
  bool InAutocommit() const;

  const std::string& path() const { return path_; }
  sqlite3* raw() const { return db_; }

 private:
  Connection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_ = nullptr;
  std::string path_;
};

// A prepared statement, finalized on destruction. Parameters are bound by
// BindAll (1-based, in order); a binding error is kept and returned by the
// next Step/Run so call sites stay linear.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Binds parameters 1..N. Accepts integers, bool, double, string-likes,
  // std::nullopt / std::optional<T> (NULL when empty).
  template <typename... Args>
  Statement& BindAll(const Args&... args) {
    int index = 1;
    (Bind(index++, args), ...);
    return *this;
  }

  // true: a row is ready to read; false: the statement is done.
  absl::StatusOr<bool> Step();
  // Steps once and expects no row (INSERT/UPDATE/DDL).
  absl::Status Run();
  // Ready for new bindings and a new execution.
  void Reset();

  bool ColumnIsNull(int column) const;
  int64_t ColumnInt64(int column) const;
  int ColumnInt(int column) const;
  bool ColumnBool(int column) const { return ColumnInt64(column) != 0; }
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;
  std::optional<double> ColumnOptionalDouble(int column) const;
  std::optional<int64_t> ColumnOptionalInt64(int column) const;

 private:
  friend class Connection;
  Statement(const Connection* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  void Bind(int index, std::nullopt_t);
  void Bind(int index, double value);
  void Bind(int index, absl::string_view value);
  void Bind(int index, const std::string& value) {
    Bind(index, absl::string_view(value));
  }
  void Bind(int index, const char* value) {
    Bind(index, absl::string_view(value));
  }
  template <typename T,
            typename = std::enable_if_t<std::is_integral_v<T>>>
  void Bind(int index, T value) {
    BindInt64(index, static_cast<int64_t>(value));
  }
  template <typename T>
  void Bind(int index, const std::optional<T>& value) {
    if (value.has_value()) {
      Bind(index, *value);
    } else {
      Bind(index, std::nullopt);
    }
  }
  void BindInt64(int index, int64_t value);
  void KeepBindError(int code, int index);

  const Connection* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status bind_status_;
};

// BEGIN on creation; ROLLBACK on destruction unless Commit() succeeded, so an
// early return never leaves a half-written transaction behind.
class Transaction {
 public:
  enum class Mode {
    kDeferred,   // takes locks on first use (read transactions)
    kImmediate,  // takes the write lock now: BUSY surfaces here, not mid-way
  };

  static absl::StatusOr<Transaction> Begin(Connection& db, Mode mode);

  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(Connection* db) : db_(db) {}

  Connection* db_ = nullptr;  // null once committed, rolled back or moved
};

}  // namespace kt::db

#endif  // KERNTUNE_DB_SQLITE_H_
