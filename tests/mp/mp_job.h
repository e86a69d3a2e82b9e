// Jobs of real rank processes for the failure tests (mp_failures, mp_shrink). The parent serves the rendezvous
// (RootServer in kForever mode), forks the ranks, which re-execute this program with "--rank-main" and the given
// arguments, reads the one-line reports they write to a pipe (MP_REPORT_FD), and kills them at will.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/hmac.h"
#include "bootstrap/root_server.h"

namespace mp {

// The parent's checks: a failed one is printed and counted; the test fails at the end when any did.
inline int g_failures = 0;
#define EXPECT(cond, ...)                         \
  do {                                            \
    if (!(cond)) {                                \
      std::fprintf(stderr, "FAIL: " __VA_ARGS__); \
      std::fprintf(stderr, "\n");                 \
      ++mp::g_failures;                           \
    }                                             \
  } while (0)

using Clock = std::chrono::steady_clock;

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The rendezvous root every job of the test meets at, served on a thread for the test's lifetime.
class JobRoot {
 public:
  JobRoot()
      : secret_bytes_(bagua::random_bytes(32)),
        secret_(bagua::to_hex(secret_bytes_)),
        server_(bagua::Socket::listen(bagua::SockAddr::resolve("127.0.0.1", 0)), secret_bytes_,
                bagua::RootServer::Mode::kForever),
        address_(server_.address()),
        thread_([this] { server_.run(stop_, 1 << 30); }) {}
  ~JobRoot() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }
  const std::string& secret() const { return secret_; }

 private:
  bagua::Bytes secret_bytes_;
  std::string secret_;
  bagua::RootServer server_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Job {
  std::vector<pid_t> pids;
  int report_read = -1;
  std::vector<std::string> lines;  // complete report lines, in arrival order
  std::string partial;
};

// Starts nranks processes of `program` (this executable, as argv[0] names it) with "--rank-main" + args.
inline Job launch(const JobRoot& root, const char* program, const std::vector<std::string>& args, int nranks,
                  double timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(2);
  Job job;
  job.report_read = fds[0];
  for (int r = 0; r < nranks; ++r) {
    // Everything the child needs is built before fork: it only execs.
    std::vector<std::string> env = {"BAGUA_RANK=" + std::to_string(r),
                                    "BAGUA_WORLD_SIZE=" + std::to_string(nranks),
                                    "BAGUA_ROOT_ADDR=" + root.address(),
                                    "BAGUA_ROOT_HOSTED=1",
                                    "BAGUA_SECRET=" + root.secret(),
                                    "BAGUA_TIMEOUT=" + std::to_string(timeout_s),
                                    "BAGUA_LOG_LEVEL=error",
                                    "MP_REPORT_FD=" + std::to_string(fds[1])};
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      if (kv.rfind("BAGUA_", 0) != 0 && kv.rfind("MP_", 0) != 0) env.push_back(kv);
    }
    std::vector<std::string> argv_text = {program, "--rank-main"};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> envp, argv;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (std::string& s : argv_text) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      execve("/proc/self/exe", argv.data(), envp.data());
      _exit(127);
    }
    job.pids.push_back(pid);
  }
  close(fds[1]);
  return job;
}

// Reads report lines, calling on_line for each, until `until` holds or `seconds` pass; returns until().
inline bool read_reports(Job& job, double seconds, const std::function<void(const std::string&)>& on_line,
                         const std::function<bool()>& until) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!until()) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd pfd{job.report_read, POLLIN, 0};
    if (poll(&pfd, 1, left) <= 0) continue;
    char buf[4096];
    ssize_t n = read(job.report_read, buf, sizeof(buf));
    if (n <= 0) return until();
    job.partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = job.partial.find('\n')) != std::string::npos) {
      std::string line = job.partial.substr(0, nl);
      job.partial.erase(0, nl + 1);
      job.lines.push_back(line);
      on_line(line);
    }
  }
  return true;
}

inline void reap(Job& job) {
  for (pid_t pid : job.pids) kill(pid, SIGKILL);
  for (pid_t pid : job.pids) waitpid(pid, nullptr, 0);
  close(job.report_read);
}

}  // namespace mp
