// RAII wrappers over sqlite3 / sqlite3_stmt and the SQLite -> absl::Status
// mapping.
#include "db/sqlite.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "db/sql.h"

namespace kt::db {

absl::Status SqliteStatus(int code, absl::string_view message) {
  switch (code) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return absl::OkStatus();
    // Extended constraint codes first: they say whose fault it is.
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return absl::FailedPreconditionError(message);
    case SQLITE_CONSTRAINT_CHECK:
    case SQLITE_CONSTRAINT_NOTNULL:
      return absl::InvalidArgumentError(message);
    default:
      break;
  }
  switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(message);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(message);
    case SQLITE_CANTOPEN:
      return absl::NotFoundError(message);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
      return absl::InvalidArgumentError(message);
    case SQLITE_INTERRUPT:
      return absl::CancelledError(message);
    case SQLITE_ABORT:
    case SQLITE_SCHEMA:
      return absl::AbortedError(message);
    default:
      return absl::InternalError(message);
  }
}

// --- Connection ---------------------------------------------------------------

absl::StatusOr<Connection> Connection::Open(const std::string& path,
                                            int flags) {
  sqlite3* db = nullptr;
  const int code = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  // Even a failed open may allocate a handle (for its error message).
  Connection connection(db, path);
  if (code != SQLITE_OK) return connection.Error(code, "opening");
  sqlite3_extended_result_codes(db, 1);
  return connection;
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Connection::~Connection() { sqlite3_close_v2(db_); }

absl::Status Connection::Exec(const char* sql) {
  const int code = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (code != SQLITE_OK) return Error(code, "executing");
  return absl::OkStatus();
}

absl::StatusOr<Statement> Connection::Prepare(const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  const int code = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
  if (code != SQLITE_OK) {
    return Error(code, absl::StrCat("preparing \"", sql, "\""));
  }
  return Statement(this, stmt);
}

absl::Status Connection::Error(int code, absl::string_view what) const {
  // sqlite3_errmsg describes the last failed call on this handle; with no
  // handle (out of memory at open) the generic text of the code is all.
  const char* detail =
      db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(code);
  return SqliteStatus(code, absl::StrCat(path_, ": ", what, ": ", detail,
                                         " (sqlite code ", code, ")"));
}

int64_t Connection::TotalChanges() const { return sqlite3_total_changes64(db_); }

bool Connection::InAutocommit() const { return sqlite3_get_autocommit(db_) != 0; }

// --- Statement ------------------------------------------------------------------

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      bind_status_(std::move(other.bind_status_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_status_ = std::move(other.bind_status_);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::KeepBindError(int code, int index) {
  if (code != SQLITE_OK && bind_status_.ok()) {
    bind_status_ = db_->Error(
        code, absl::StrCat("binding parameter ", index, " of \"",
                           sqlite3_sql(stmt_), "\""));
  }
}

void Statement::Bind(int index, std::nullopt_t) {
  KeepBindError(sqlite3_bind_null(stmt_, index), index);
}

void Statement::Bind(int index, double value) {
  KeepBindError(sqlite3_bind_double(stmt_, index, value), index);
}

void Statement::Bind(int index, absl::string_view value) {
  KeepBindError(sqlite3_bind_text64(stmt_, index, value.data(), value.size(),
                                    SQLITE_TRANSIENT, SQLITE_UTF8),
                index);
}

void Statement::BindInt64(int index, int64_t value) {
  KeepBindError(sqlite3_bind_int64(stmt_, index, value), index);
}

absl::StatusOr<bool> Statement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  const int code = sqlite3_step(stmt_);
  if (code == SQLITE_ROW) return true;
  if (code == SQLITE_DONE) return false;
  return db_->Error(code, absl::StrCat("running \"", sqlite3_sql(stmt_), "\""));
}

absl::Status Statement::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  if (*row) {
    return absl::InternalError(absl::StrCat(
        db_->path(), ": \"", sqlite3_sql(stmt_), "\" returned a row"));
  }
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_status_ = absl::OkStatus();
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

int Statement::ColumnInt(int column) const {
  return sqlite3_column_int(stmt_, column);
}

double Statement::ColumnDouble(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text),
                     sqlite3_column_bytes(stmt_, column));
}

std::optional<double> Statement::ColumnOptionalDouble(int column) const {
  if (ColumnIsNull(column)) return std::nullopt;
  return ColumnDouble(column);
}

std::optional<int64_t> Statement::ColumnOptionalInt64(int column) const {
  if (ColumnIsNull(column)) return std::nullopt;
  return ColumnInt64(column);
}

// --- Transaction ------------------------------------------------------------------

absl::StatusOr<Transaction> Transaction::Begin(Connection& db, Mode mode) {
  absl::Status status = db.Exec(mode == Mode::kImmediate ? sql::kBeginImmediate
                                                         : sql::kBeginDeferred);
  if (!status.ok()) return status;
  return Transaction(&db);
}

Transaction::Transaction(Transaction&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
  // SQLite may already have rolled back on its own (some I/O and memory
  // errors do); a second ROLLBACK would only fail. Errors here have no caller
  // to go to: the transaction is abandoned either way.
  if (db_ != nullptr && !db_->InAutocommit()) {
    db_->Exec(sql::kRollback).IgnoreError();
  }
}

absl::Status Transaction::Commit() {
  if (db_ == nullptr) {
    return absl::FailedPreconditionError("transaction already finished");
  }
  absl::Status status = db_->Exec(sql::kCommit);
  // A failed COMMIT (BUSY on a deferred transaction) leaves the transaction
  // open; the destructor rolls it back.
  if (status.ok()) db_ = nullptr;
  return status;
}

}  // namespace kt::db
