#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace dcr::cli {

Result<ChildProcess> ChildProcess::SpawnSelf(const std::vector<std::string>& args, const std::string& stdout_path,
                                             const std::string& stderr_path) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ErrnoError("readlink /proc/self/exe");
  self[n] = 0;
  const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return ErrnoError("open " + stdout_path);
  const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err < 0) {
    ::close(out);
    return ErrnoError("open " + stderr_path);
  }
  std::vector<char*> argv{self};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out), ::close(err);
    return ErrnoError("fork");
  }
  if (pid == 0) {
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(self, argv.data());
    ::_exit(127);
  }
  ::close(out), ::close(err);
  return ChildProcess(pid);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

Result<bool> ChildProcess::TryReap(int* status) {
  const pid_t r = ::waitpid(pid_, status, WNOHANG);
  if (r < 0) return ErrnoError("waitpid");
  if (r != pid_) return false;
  pid_ = -1;
  return true;
}

Result<int> ChildProcess::Wait(int timeout_ms) {
  if (pid_ <= 0) return Internal("waiting for a process that was already reaped");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const pid_t pid = pid_;
    int status = 0;
    DCR_ASSIGN_OR_RETURN(bool reaped, TryReap(&status));
    if (reaped) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return IoError("process " + std::to_string(pid) + " died from signal " + std::to_string(WTERMSIG(status)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return IoError("process did not exit within " + std::to_string(timeout_ms / 1000) + " s; killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool ChildProcess::Exited(int* code) {
  if (pid_ <= 0) return true;
  int status = 0;
  const Result<bool> reaped = TryReap(&status);
  if (!reaped.ok() || !*reaped) return false;
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}

void ChildProcess::Terminate(int grace_ms) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  (void)Wait(grace_ms);
}

}  // namespace dcr::cli
