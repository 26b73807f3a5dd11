// Early-return helpers for absl::Status / absl::StatusOr inside db/. Prefixed
// KT_DB_ so they can never collide with another module's macros.
#ifndef KERNTUNE_DB_STATUS_MACROS_H_
#define KERNTUNE_DB_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KT_DB_CONCAT_INNER(a, b) a##b
#define KT_DB_CONCAT(a, b) KT_DB_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define KT_DB_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status kt_db_status_ = (expr);          \
    if (!kt_db_status_.ok()) return kt_db_status_;  \
  } while (false)

// `lhs = value of expr`, or return its status when it is not OK. `lhs` may
// declare a variable: KT_DB_ASSIGN_OR_RETURN(Statement s, db.Prepare(...)).
#define KT_DB_ASSIGN_OR_RETURN(lhs, expr) \
  KT_DB_ASSIGN_OR_RETURN_IMPL(KT_DB_CONCAT(kt_db_statusor_, __LINE__), lhs, expr)

#define KT_DB_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // KERNTUNE_DB_STATUS_MACROS_H_
