// bagua-run: starts N local ranks of a program with the BAGUA_* variables set, serves their rendezvous,
// forwards SIGINT/SIGTERM, and when one rank fails stops the others and says which rank and how.
//
//   bagua-run -n N [--bind auto|none] [--tag-output] [--keep-going] [--] prog args...
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "bootstrap/hmac.h"
#include "bootstrap/root_server.h"

namespace {

volatile sig_atomic_t g_forward_signal = 0;
void on_signal(int sig) { g_forward_signal = sig; }

struct Options {
  int nranks = 0;
  bool tag_output = false;
  bool keep_going = false;
  bool bind = true;
  std::vector<char*> argv;
};

[[noreturn]] void usage(const char* message) {
  if (message) std::fprintf(stderr, "bagua-run: %s\n", message);
  std::fprintf(stderr,
               "usage: bagua-run -n N [--bind auto|none] [--tag-output] [--keep-going] [--] program [args...]\n"
               "  -n N          number of ranks to start on this host\n"
               "  --bind auto   (default) when there are at least N cores, give each rank its own share of them\n"
               "  --bind none   leave placement to the scheduler\n"
               "  --tag-output  prefix every output line with [rank] (output that processes left behind by the\n"
               "                ranks still hold open is read for 2 s after the last rank exits)\n"
               "  --keep-going  when a rank fails, let the others finish instead of stopping them\n");
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options opt;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-n" || arg == "-np") {
      if (i + 1 >= argc) usage("-n needs a number");
      char* end = nullptr;
      long n = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || n < 1 || n > 4096) usage("-n takes a number from 1 to 4096");
      opt.nranks = static_cast<int>(n);
    } else if (arg == "--bind") {
      if (i + 1 >= argc) usage("--bind needs auto or none");
      std::string how = argv[++i];
      if (how != "auto" && how != "none") usage("--bind takes auto or none");
      opt.bind = how == "auto";
    } else if (arg == "--tag-output") {
      opt.tag_output = true;
    } else if (arg == "--keep-going") {
      opt.keep_going = true;
    } else if (arg == "-h" || arg == "--help") {
      usage(nullptr);
    } else if (!arg.empty() && arg[0] == '-') {
      usage(("unknown option " + arg).c_str());
    } else {
      break;
    }
  }
  if (opt.nranks == 0) usage("-n is required");
  if (i >= argc) usage("no program given");
  for (; i < argc; ++i) opt.argv.push_back(argv[i]);
  opt.argv.push_back(nullptr);
  return opt;
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int out_fd = -1;  // --tag-output pipes
  int err_fd = -1;
  std::string out_partial, err_partial;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "ended";
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// --bind auto: the cores this launcher may use, split into nranks contiguous shares, one per rank; empty when there
// are fewer cores than ranks. Ranks that spin while they wait for each other must not start on one core: the
// scheduler separates them only after a while (milliseconds to seconds), and until then every operation costs a
// context switch (about 19 us instead of 1.2 us for a 4 KiB allreduce on the 2-core VM).
std::vector<cpu_set_t> rank_cpu_sets(int nranks) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  int n = static_cast<int>(cpus.size());
  if (n < nranks) return {};
  std::vector<cpu_set_t> sets(nranks);
  for (int r = 0; r < nranks; ++r) {
    CPU_ZERO(&sets[r]);
    for (int k = r * n / nranks; k < (r + 1) * n / nranks; ++k) CPU_SET(cpus[k], &sets[r]);
  }
  return sets;
}

void pump_output(int& fd, std::string& partial, int rank, FILE* sink) {
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n <= 0) {
    if (!partial.empty()) std::fprintf(sink, "[%d] %s\n", rank, partial.c_str());
    partial.clear();
    close(fd);
    fd = -1;
    return;
  }
  partial.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
    std::fprintf(sink, "[%d] %.*s\n", rank, static_cast<int>(nl - start), partial.data() + start);
  partial.erase(0, start);
  std::fflush(sink);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_options(argc, argv);

  // Serve the rendezvous here: the port comes from binding port 0, so it never collides.
  bagua::Socket listener;
  std::string secret_hex;
  bagua::Bytes secret;
  try {
    bagua::SockAddr bind_addr = bagua::SockAddr::resolve("127.0.0.1", 0);
    bagua::socket_ifname_address(&bind_addr);  // BAGUA_SOCKET_IFNAME, when set
    listener = bagua::Socket::listen(bind_addr);
    secret = bagua::random_bytes(32);
    secret_hex = bagua::to_hex(secret);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bagua-run: cannot start the rendezvous root: %s\n", e.what());
    return 1;
  }
  std::string root_addr = listener.local_address().str();
  std::atomic<bool> stop_root(false);
  bagua::RootServer root(std::move(listener), secret, bagua::RootServer::Mode::kForever);
  std::thread root_thread([&] {
    try {
      root.run(stop_root, 1 << 30);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bagua-run: rendezvous root stopped: %s\n", e.what());
    }
  });

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  // Each rank's environment, made before fork: the root thread runs, so the child may only make async-signal-safe
  // calls until exec (an allocation could wait forever on a lock that thread held at the fork; found by ASan).
  auto rank_environment = [&](int r) {
    const std::vector<std::pair<std::string, std::string>> ours = {{"BAGUA_RANK", std::to_string(r)},
                                                                   {"BAGUA_WORLD_SIZE", std::to_string(opt.nranks)},
                                                                   {"BAGUA_LOCAL_RANK", std::to_string(r)},
                                                                   {"BAGUA_LOCAL_SIZE", std::to_string(opt.nranks)},
                                                                   {"BAGUA_ROOT_ADDR", root_addr},
                                                                   {"BAGUA_ROOT_HOSTED", "1"},
                                                                   {"BAGUA_SECRET", secret_hex}};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      bool replaced = std::any_of(ours.begin(), ours.end(), [&](const auto& kv) {
        return entry.compare(0, kv.first.size() + 1, kv.first + "=") == 0;
      });
      if (!replaced) env.push_back(std::move(entry));
    }
    for (const auto& [key, value] : ours) env.push_back(key + "=" + value);
    return env;
  };
  std::vector<Rank> ranks(opt.nranks);
  std::vector<cpu_set_t> cpu_sets = opt.bind ? rank_cpu_sets(opt.nranks) : std::vector<cpu_set_t>{};
  for (int r = 0; r < opt.nranks; ++r) {
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (opt.tag_output && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
      std::perror("bagua-run: pipe");
      return 1;
    }
    std::vector<std::string> env = rank_environment(r);
    std::vector<char*> envp;
    for (std::string& entry : env) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const std::string cannot_run = fmt::format("bagua-run: cannot run {}: not found or not executable\n", opt.argv[0]);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("bagua-run: fork");
      return 1;
    }
    if (pid == 0) {
      setpgid(0, 0);  // signals reach ranks through bagua-run only, never twice
      if (opt.tag_output) {
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
      }
      if (!cpu_sets.empty()) sched_setaffinity(0, sizeof(cpu_set_t), &cpu_sets[r]);
      execvpe(opt.argv[0], opt.argv.data(), envp.data());
      ssize_t ignored = write(2, cannot_run.data(), cannot_run.size());
      (void)ignored;
      _exit(127);
    }
    setpgid(pid, pid);  // also here, so a signal sent before the child runs reaches its group
    ranks[r].pid = pid;
    ranks[r].running = true;
    if (opt.tag_output) {
      close(out_pipe[1]);
      close(err_pipe[1]);
      ranks[r].out_fd = out_pipe[0];
      ranks[r].err_fd = err_pipe[0];
    }
  }

  int running = opt.nranks;
  int first_failed = -1;
  bool stopping = false;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  // The ranks' process groups, also of those that have exited: what they started may still run (and hold their
  // output pipes). An exited rank is left a zombie until bagua-run ends (waitid's WNOWAIT below), so that its
  // pid, and with it the group's id, cannot go to an unrelated process meanwhile.
  auto signal_all = [&](int sig) {
    for (Rank& rank : ranks) kill(-rank.pid, sig);
  };
  // With --tag-output, once every rank has exited their pipes get this long to reach end of file; a process they
  // left behind may hold a pipe open for ever.
  constexpr auto kOutputGrace = std::chrono::seconds(2);
  auto output_deadline = std::chrono::steady_clock::time_point::max();
  auto output_open = [&] {
    return std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.out_fd >= 0 || r.err_fd >= 0; });
  };
  auto close_outputs = [&] {
    for (int r = 0; r < opt.nranks; ++r) {
      for (auto [fd, partial, sink] : {std::make_tuple(&ranks[r].out_fd, &ranks[r].out_partial, stdout),
                                       std::make_tuple(&ranks[r].err_fd, &ranks[r].err_partial, stderr)}) {
        if (*fd < 0) continue;
        if (!partial->empty()) std::fprintf(sink, "[%d] %s\n", r, partial->c_str());
        partial->clear();
        close(*fd);
        *fd = -1;
        std::fprintf(stderr, "bagua-run: rank %d exited, but a process it started still holds its %s; not waiting\n", r,
                     sink == stdout ? "stdout" : "stderr");
      }
    }
  };

  while (running > 0 || (opt.tag_output && output_open())) {
    if (int sig = g_forward_signal) {
      g_forward_signal = 0;
      signal_all(sig);
      if (running == 0) close_outputs();  // only output was left to wait for
      if (!stopping) {
        stopping = true;
        kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
    if (running == 0 && opt.tag_output) {
      const auto now = std::chrono::steady_clock::now();
      if (output_deadline == std::chrono::steady_clock::time_point::max()) output_deadline = now + kOutputGrace;
      if (now > output_deadline) {
        close_outputs();
        break;
      }
    }
    if (opt.tag_output) {
      std::vector<pollfd> fds;
      std::vector<std::pair<int, bool>> owners;
      for (int r = 0; r < opt.nranks; ++r) {
        if (ranks[r].out_fd >= 0) {
          fds.push_back({ranks[r].out_fd, POLLIN, 0});
          owners.push_back({r, true});
        }
        if (ranks[r].err_fd >= 0) {
          fds.push_back({ranks[r].err_fd, POLLIN, 0});
          owners.push_back({r, false});
        }
      }
      poll(fds.data(), fds.size(), 50);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Rank& rank = ranks[owners[i].first];
        if (owners[i].second)
          pump_output(rank.out_fd, rank.out_partial, owners[i].first, stdout);
        else
          pump_output(rank.err_fd, rank.err_partial, owners[i].first, stderr);
      }
    } else {
      usleep(20 * 1000);
    }
    for (int r = 0; r < opt.nranks; ++r) {
      if (!ranks[r].running) continue;
      siginfo_t info{};
      if (waitid(P_PID, ranks[r].pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != ranks[r].pid) continue;
      const pid_t pid = ranks[r].pid;
      const int status = info.si_code == CLD_EXITED
                             ? W_EXITCODE(info.si_status, 0)
                             : W_EXITCODE(0, info.si_status) | (info.si_code == CLD_DUMPED ? WCOREFLAG : 0);
      ranks[r].running = false;
      ranks[r].status = status;
      --running;
      if (failed(status) && first_failed < 0) {
        first_failed = r;
        std::fprintf(stderr, "bagua-run: rank %d (pid %d) %s\n", r, pid, describe_exit(status).c_str());
        if (!opt.keep_going && !stopping) {
          stopping = true;
          signal_all(SIGTERM);
          kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        }
      }
    }
    if (stopping && std::chrono::steady_clock::now() > kill_deadline) {
      signal_all(SIGKILL);
      kill_deadline = std::chrono::steady_clock::time_point::max();
    }
  }

  for (const Rank& rank : ranks) waitpid(rank.pid, nullptr, 0);  // the zombies (every rank has exited)
  stop_root.store(true);
  root_thread.join();
  int failures = 0;
  for (const Rank& rank : ranks) failures += failed(rank.status);
  if (first_failed < 0) return 0;
  if (failures > 1)
    std::fprintf(stderr, "bagua-run: %d of %d ranks failed; first: rank %d\n", failures, opt.nranks, first_failed);
  int status = ranks[first_failed].status;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
