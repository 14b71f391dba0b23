// Status and Result<T>: errors are values (DESIGN principle 6). No exception
// crosses a module boundary; every failure carries one message that names the
// cause and the fix, and the CLI prints it and exits non-zero.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace scaletrain {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad config, bad flag, layout that does not divide
  kNotFound,         // missing file or key
  kDataLoss,         // truncated or corrupt file
  kFailedPrecondition,  // e.g. checkpoint from a different model
  kIoError,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prefixes context ("while loading X: ") to the message; keeps the code.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result built from an OK status holds no value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define ST_CONCAT_INNER(a, b) a##b
#define ST_CONCAT(a, b) ST_CONCAT_INNER(a, b)

#define ST_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::scaletrain::Status st_status_ = (expr);    \
    if (!st_status_.ok()) return st_status_;     \
  } while (0)

#define ST_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define ST_ASSIGN_OR_RETURN(lhs, expr) \
  ST_ASSIGN_OR_RETURN_IMPL(ST_CONCAT(st_result_, __LINE__), lhs, expr)

}  // namespace scaletrain
