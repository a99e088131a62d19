// Errors are values. A Status carries a code that tells the caller what to do next and a
// message that names the file, tensor or range involved. Result<T> is a value or a Status.
#pragma once

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace dcr {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // caller passed something unusable; fix the call
  kNotFound = 2,         // a file or tensor does not exist
  kIoError = 3,          // the OS refused a read/write/mmap; may succeed on retry
  kCorrupt = 4,          // bytes fail checksum or structure checks; refetch them
  kMismatch = 5,         // two catalogs (names, dtypes, shapes) disagree; give up
  kWrongBase = 6,        // target does not hold the delta's base state; catch up first
  kUnsupported = 7,      // a valid but unsupported format version or feature
  kInternal = 8,         // a bug in dcr
};

const char* StatusCodeName(StatusCode code);
// The inverse of StatusCodeName; false for any other string.
bool StatusCodeFromName(const std::string& name, StatusCode* code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>"
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
inline Status WrongBase(std::string m) { return {StatusCode::kWrongBase, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Builds an IoError from errno: "<what>: <strerror(errno)>".
Status ErrnoError(const std::string& what);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "dcr: invariant violated: Result built from an OK Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Aborts loudly: for invariant violations (bugs), never for bad input.
[[noreturn]] void Fatal(const char* file, int line, const std::string& message);

}  // namespace dcr

#define DCR_CONCAT_INNER(a, b) a##b
#define DCR_CONCAT(a, b) DCR_CONCAT_INNER(a, b)

#define DCR_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::dcr::Status dcr_status_ = (expr);        \
    if (!dcr_status_.ok()) return dcr_status_; \
  } while (0)

#define DCR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define DCR_ASSIGN_OR_RETURN(lhs, expr) \
  DCR_ASSIGN_OR_RETURN_IMPL(DCR_CONCAT(dcr_result_, __LINE__), lhs, expr)

#define DCR_CHECK(cond)                                                \
  do {                                                                 \
    if (!(cond)) ::dcr::Fatal(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)
