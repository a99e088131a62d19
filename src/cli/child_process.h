// Child processes of the dcr binary itself (`dcr demo` starts receivers and producers as
// separate processes). A ChildProcess that goes out of scope while its process still runs
// kills it (SIGKILL) and reaps it: no process outlives its owner.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace dcr::cli {

class ChildProcess {
 public:
  // Runs this executable (/proc/self/exe) with `args`, stdout and stderr appended to the files.
  static Result<ChildProcess> SpawnSelf(const std::vector<std::string>& args, const std::string& stdout_path,
                                        const std::string& stderr_path);
  ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  // The exit code; kIoError if it has not exited within timeout_ms (it is then killed) or died
  // from a signal.
  Result<int> Wait(int timeout_ms);
  // Whether it has exited (reaped now, or by an earlier Wait); if it exited now, its exit code
  // (or -1 after a signal) goes to *code.
  bool Exited(int* code);
  // SIGTERM, then SIGKILL if it has not exited within grace_ms.
  void Terminate(int grace_ms);
  pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  // Reaps the process if it has exited (waitpid status to *status; pid_ is then -1): true, or
  // false if it still runs. kIoError from waitpid itself.
  Result<bool> TryReap(int* status);
  pid_t pid_ = -1;
};

}  // namespace dcr::cli
