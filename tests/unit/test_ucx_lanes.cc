// What UCX 1.13 says only in text (transport/ucx/ucx_text.h): which UCX_TLS values let TCP and shared memory in, and
// which endpoint descriptions may leave a completed send's last bytes behind. Canned lines first, then real UCX
// workers of this process connected to each other, then communicators of 2 ranks as threads: one over TCP registers
// with the idle-progress thread, one over shared memory does not. Also: a UCX_TLS that leaves TCP out draws no UCX
// warning about bagua's TCP settings.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/api_guard.h"
#include "core/comm.h"
#include "transport/ucx/ucx_text.h"
#include "transport/ucx/ucx_transport.h"

using namespace bagua;

namespace {

// Sets an environment variable (unsets it for null) for its lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = std::getenv(name);
    had_ = before != nullptr;
    if (had_) before_ = before;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), before_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, before_;
  bool had_ = false;
};

// What is left to read in `file`.
std::string read_rest(std::FILE* file) {
  std::string out;
  for (int c; (c = std::fgetc(file)) != EOF;) out.push_back(static_cast<char>(c));
  return out;
}

// Sends stdout and stderr (UCX logs to stdout) to a temporary file for its lifetime; text() reads what came.
class CapturedOutput {
 public:
  CapturedOutput() : file_(std::tmpfile()) {
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = dup(1);
    saved_err_ = dup(2);
    if (file_ != nullptr) {
      dup2(fileno(file_), 1);
      dup2(fileno(file_), 2);
    }
  }
  ~CapturedOutput() {
    restore();
    if (file_ != nullptr) std::fclose(file_);
  }
  std::string text() {
    restore();
    if (file_ == nullptr) return "(no temporary file)";
    std::rewind(file_);
    return read_rest(file_);
  }

 private:
  void restore() {
    if (saved_out_ < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_out_, 1);
    dup2(saved_err_, 2);
    close(saved_out_);
    close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  std::FILE* file_;
  int saved_out_ = -1, saved_err_ = -1;
};

// Transports of one job of `ranks` ranks in this process, each with endpoints to all, made while UCX_TLS is `tls`.
// With other_pid_namespaces, each transport is made as for peers in other PID namespaces.
std::vector<std::unique_ptr<UcxTransport>> connected(const char* tls, int ranks = 2,
                                                     bool other_pid_namespaces = false) {
  ScopedEnv tls_setting("UCX_TLS", tls), log_level("UCX_LOG_LEVEL", "warn");
  std::vector<std::unique_ptr<UcxTransport>> transports;
  std::vector<Bytes> addresses;
  for (int rank = 0; rank < ranks; ++rank) {
    transports.push_back(std::make_unique<UcxTransport>(rank, ranks, 5000, size_t{1} << 20, other_pid_namespaces));
    addresses.push_back(transports.back()->local_address());
  }
  for (auto& t : transports) t->connect(addresses);
  return transports;
}

const char* const kSysvEndpoint = R"(# endpoint to rank 1
#
# UCP endpoint 
#
#               peer: <no debug data>
#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0 keepalive
#
#                tag_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)
#                  rma_bw: mds rndv_rkey_size 9
)";
const char* const kTcpEndpoint = R"(# endpoint to rank 1
#
# UCP endpoint 
#
#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#
#                tag_send: 0..<egr/short>..8184..<egr/zcopy>..19240..<rndv>..(inf)
)";

// Runs this test program's hidden test case `tag` in a child process whose only UCX_TLS is `tls` in a ucx.conf file
// (UCX reads its files once per process, so the child is new), started in the file's folder so that no other
// ./ucx.conf is read after it. Returns the child's exit status and output.
constexpr const char* kChildMarker = "BAGUA_TEST_UCX_CONF_CHILD";
int run_with_ucx_conf(const std::string& tag, const std::string& tls, std::string* output) {
  char exe[4096];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length <= 0) return -1;
  exe[length] = '\0';
  char dir[] = "/tmp/bagua-ucx-conf-XXXXXX";
  if (mkdtemp(dir) == nullptr) return -1;
  const std::string conf = std::string(dir) + "/ucx.conf", log = std::string(dir) + "/out";
  if (std::FILE* f = std::fopen(conf.c_str(), "w")) {
    std::fprintf(f, "UCX_TLS=%s\n", tls.c_str());
    std::fclose(f);
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "UCX_TLS=", 8) != 0 && std::strncmp(*e, "UCX_CONFIG_DIR=", 15) != 0) env.push_back(*e);
  env.push_back(std::string("UCX_CONFIG_DIR=") + dir);
  env.push_back(std::string(kChildMarker) + "=1");
  std::vector<char*> envp, argv = {exe, const_cast<char*>(tag.c_str()), nullptr};
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || chdir(dir) != 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(exe, argv.data(), envp.data());
    _exit(127);
  }
  int status = -1;
  if (child > 0) waitpid(child, &status, 0);
  output->clear();
  if (std::FILE* f = std::fopen(log.c_str(), "r")) {
    *output = read_rest(f);
    std::fclose(f);
  }
  std::remove(conf.c_str());
  std::remove(log.c_str());
  rmdir(dir);
  return status;
}

// The child cases run only in such a child (a wildcard filter in the parent selects hidden cases too).
bool in_ucx_conf_child() { return std::getenv(kChildMarker) != nullptr; }

}  // namespace

TEST_CASE("UCX_TLS: which values let TCP and shared memory in (UCX 1.13's rules)", "[transport]") {
  auto tcp = [](const char* tls) { return ucx_tls_allows(tls, {"tcp"}); };
  auto mm = [](const char* tls) { return ucx_tls_allows(tls, {"posix", "sysv", "xpmem"}, {"mm", "sm", "shm"}); };
  CHECK(tcp(nullptr));
  CHECK(tcp(""));
  CHECK(tcp("all"));
  CHECK(tcp("tcp"));
  CHECK(tcp("sm,tcp"));
  CHECK(tcp("\\tcp"));
  CHECK(tcp("sm,tcp:aux"));
  CHECK(tcp("^sm"));
  CHECK_FALSE(tcp("sm"));
  CHECK_FALSE(tcp("self,sysv"));
  CHECK_FALSE(tcp("^tcp"));
  CHECK_FALSE(tcp("^sm,tcp"));
  CHECK_FALSE(tcp("tcpx"));
  CHECK(mm("sm"));
  CHECK(mm("shm"));
  CHECK(mm("mm"));
  CHECK(mm("self,posix"));
  CHECK(mm("^sysv"));  // posix stays
  CHECK(mm("^tcp"));
  CHECK_FALSE(mm("tcp"));
  CHECK_FALSE(mm("\\sm"));  // strict: the name only, and no transport is called "sm"
  CHECK_FALSE(mm("^sm"));
  CHECK_FALSE(mm("^mm,tcp"));
  CHECK_FALSE(mm("^posix,sysv,xpmem"));
}

TEST_CASE("ucp_config_print's lines: the value of one setting", "[transport]") {
  const std::string text = "UCX_NET_DEVICES=all\nUCX_TLS=^sysv\nUCX_SOCKADDR_TLS_PRIORITY=rdmacm,tcp\n";
  CHECK(ucx_config_value(text, "UCX_TLS") == "^sysv");
  CHECK(ucx_config_value(text, "UCX_NET_DEVICES") == "all");
  CHECK(ucx_config_value(text, "UCX_TL") == "");
  CHECK(ucx_config_value("", "UCX_TLS") == "");
}

TEST_CASE("endpoint descriptions: which lanes may leave a completed send's bytes behind", "[transport]") {
  CHECK_FALSE(lanes_may_linger(""));  // one rank: no endpoint to a peer
  CHECK_FALSE(lanes_may_linger("UCX transport (shut down)"));
  CHECK_FALSE(lanes_may_linger(kSysvEndpoint));
  CHECK(lanes_may_linger(kTcpEndpoint));
  CHECK(lanes_may_linger(std::string(kSysvEndpoint) + kTcpEndpoint));
  const std::string header = "# UCP endpoint\n";
  // Shared memory for messages, InfiniBand for RDMA only (a receiver-driven get, no bytes left at the sender).
  CHECK_FALSE(lanes_may_linger(header +
                               "#  lane[0]:  3:posix/memory.0 md[2] -> md[2]/posix/sysdev[255] am am_bw#0 keepalive\n"
                               "#  lane[1]: 12:rc_mlx5/mlx5_0:1.0 md[4] -> md[4]/ib/sysdev[255] rma_bw#0\n"));
  CHECK(lanes_may_linger(header + "#  lane[0]: 101:rc_mlx5/mlx5_0:1.0 md[4] -> md[4]/ib/sysdev[255] am am_bw#0 wireup"
                                  "{ud_mlx5/mlx5_0:1}\n"));
  CHECK(lanes_may_linger(header + "#  lane[0]:  5:ud_verbs/mlx5_0:1.0 md[4] -> md[4]/ib/sysdev[255] tag_offload\n"));
  CHECK_FALSE(lanes_may_linger(header + "#  lane[0]: cm rdmacm\n"
                                        "#  lane[1]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am keepalive\n"));
  CHECK_FALSE(lanes_may_linger(header + "#  lane[0]:  1:cuda_ipc/cuda.0 md[1] -> md[1]/cuda_ipc/sysdev[0] am_bw#1\n"));
  // Text that cannot be read, or endpoints with no lane, count as may.
  CHECK(lanes_may_linger(header + "#  lane[0]: something new\n"));
  CHECK(lanes_may_linger(header + "#  lane[0]:  0:tcp\n#  next line/with a slash -> am\n"));
  CHECK(lanes_may_linger(header));
}

TEST_CASE("real endpoints: over shared memory nothing is left behind a completed send, over TCP it may be",
          "[transport]") {
  SECTION("shared memory (UCX_TLS=sm), without a warning about the TCP settings") {
    CapturedOutput output;
    auto pair = connected("sm");
    const std::string warnings = output.text();
    INFO(warnings);
    CHECK(warnings.find("invalid configuration") == std::string::npos);
    INFO(pair[0]->describe());
    CHECK_FALSE(pair[0]->sends_may_linger());
    CHECK_FALSE(pair[1]->sends_may_linger());
  }
  SECTION("TCP (UCX_TLS=tcp), without a warning about the shared-memory settings") {
    CapturedOutput output;
    auto pair = connected("tcp");
    const std::string warnings = output.text();
    INFO(warnings);
    CHECK(warnings.find("invalid configuration") == std::string::npos);
    INFO(pair[0]->describe());
    CHECK(pair[0]->sends_may_linger());
    CHECK(pair[1]->sends_may_linger());
  }
  SECTION("UCX_TLS=all for peers in other PID namespaces: sysv left out (it cannot connect them)") {
    auto pair = connected("all", 2, true);
    INFO(pair[0]->describe());
    CHECK(pair[0]->describe().find("sysv/") == std::string::npos);
    CHECK_FALSE(pair[0]->sends_may_linger());  // posix shared memory instead
  }
  SECTION("one rank, or a transport shut down: nothing to progress") {
    auto one = connected("tcp", 1);
    CHECK_FALSE(one[0]->sends_may_linger());
    auto pair = connected("tcp");
    pair[0]->shutdown(false);
    CHECK_FALSE(pair[0]->sends_may_linger());
  }
}

TEST_CASE("a one-host communicator over TCP registers with the idle-progress thread, over shared memory not",
          "[transport]") {
  for (const char* tls : {"tcp", "sm"}) {
    ScopedEnv tls_setting("UCX_TLS", tls), idle("BAGUA_IDLE_PROGRESS", nullptr);
    bagua_unique_id_t id;
    REQUIRE(bagua_get_unique_id(&id) == BAGUA_SUCCESS);
    bagua_comm_t comms[2] = {nullptr, nullptr};
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) ranks.emplace_back([&, r] { bagua_comm_init_rank(&comms[r], 2, id, r); });
    for (auto& t : ranks) t.join();
    INFO("UCX_TLS=" << tls);
    REQUIRE(comms[0] != nullptr);
    REQUIRE(comms[1] != nullptr);
    const bool over_tcp = std::string(tls) == "tcp";
    CHECK(comms[0]->impl->nhosts() == 1);
    CHECK(comms[0]->impl->idle_progress_registered() == over_tcp);
    CHECK(comms[1]->impl->idle_progress_registered() == over_tcp);
    for (bagua_comm_t c : comms) CHECK(bagua_comm_destroy(c) == BAGUA_SUCCESS);
  }
}

// A UCX_TLS that only a ucx.conf file sets is seen: over shared memory no TCP setting is made (UCX would warn about
// it), and for peers in other PID namespaces the file's list is not replaced by "^sysv". Each runs in a child.
TEST_CASE("UCX_TLS from a ucx.conf file", "[transport]") {
  std::string output;
  SECTION("sm: no warning about the TCP settings, endpoints over shared memory") {
    const int status = run_with_ucx_conf("[.ucx_conf_sm]", "sm", &output);
    INFO(output);
    CHECK(status == 0);
    CHECK(output.find("All tests passed") != std::string::npos);
  }
  SECTION("tcp, for peers in other PID namespaces: endpoints over TCP") {
    const int status = run_with_ucx_conf("[.ucx_conf_tcp_pid_namespaces]", "tcp", &output);
    INFO(output);
    CHECK(status == 0);
    CHECK(output.find("All tests passed") != std::string::npos);
  }
}

TEST_CASE("child: UCX_TLS=sm from ucx.conf", "[.ucx_conf_sm]") {
  if (!in_ucx_conf_child()) return;
  CapturedOutput output;
  auto pair = connected(nullptr);
  const std::string warnings = output.text();
  INFO(warnings);
  CHECK(warnings.find("invalid configuration") == std::string::npos);
  const std::string description = pair[0]->describe();
  INFO(description);
  CHECK(description.find("tcp/") == std::string::npos);
  CHECK_FALSE(pair[0]->sends_may_linger());
}

TEST_CASE("child: UCX_TLS=tcp from ucx.conf, peers in other PID namespaces", "[.ucx_conf_tcp_pid_namespaces]") {
  if (!in_ucx_conf_child()) return;
  auto pair = connected(nullptr, 2, true);
  const std::string description = pair[0]->describe();
  INFO(description);
  CHECK(description.find("tcp/") != std::string::npos);
  CHECK(description.find("posix/") == std::string::npos);
  CHECK(pair[0]->sends_may_linger());
}
