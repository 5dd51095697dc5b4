// Small absl::Status helpers (Debian's Abseil 20220623 has no ABSL_RETURN_IF_ERROR).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVF_CONCAT_INNER(a, b) a##b
#define KVF_CONCAT(a, b) KVF_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK absl::Status.
#define KVF_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status kvf_status_ = (expr);       \
    if (!kvf_status_.ok()) return kvf_status_; \
  } while (0)

// `lhs = value of expr` or return its status. lhs may be a declaration.
#define KVF_ASSIGN_OR_RETURN(lhs, expr) KVF_ASSIGN_OR_RETURN_IMPL(KVF_CONCAT(kvf_statusor_, __LINE__), lhs, expr)
#define KVF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
