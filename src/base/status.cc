#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace dcr {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kMismatch: return "mismatch";
    case StatusCode::kWrongBase: return "wrong base";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status ErrnoError(const std::string& what) {
  int err = errno;
  return IoError(what + ": " + std::strerror(err));
}

void Fatal(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "dcr: FATAL %s:%d: %s\n", file, line, message.c_str());
  std::fflush(stderr);
  std::abort();
}

bool StatusCodeFromName(const std::string& name, StatusCode* code) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c)
    if (name == StatusCodeName(static_cast<StatusCode>(c))) {
      *code = static_cast<StatusCode>(c);
      return true;
    }
  return false;
}

}  // namespace dcr
