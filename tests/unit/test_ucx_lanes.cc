// Which of a communicator's endpoints may leave a completed send's last bytes behind (UcxTransport::sends_may_linger,
// which decides whether a one-host communicator registers with the idle-progress thread): two real UCX workers of
// this process, connected to each other, over shared memory and over TCP. Also: a UCX_TLS that leaves TCP out draws
// no UCX warning about bagua's TCP settings.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "transport/ucx/ucx_transport.h"

using namespace bagua;

namespace {

// Two transports of one job of 2 ranks, each with endpoints to both, made while UCX_TLS is `tls` (unset if null).
std::vector<std::unique_ptr<UcxTransport>> connected_pair(const char* tls) {
  const char* before = std::getenv("UCX_TLS");
  const std::string saved = before != nullptr ? before : "";
  if (tls != nullptr)
    setenv("UCX_TLS", tls, 1);
  else
    unsetenv("UCX_TLS");
  std::vector<std::unique_ptr<UcxTransport>> pair;
  for (int rank = 0; rank < 2; ++rank) pair.push_back(std::make_unique<UcxTransport>(rank, 2, 5000, size_t{1} << 20));
  const std::vector<Bytes> addresses = {pair[0]->local_address(), pair[1]->local_address()};
  for (auto& t : pair) t->connect(addresses);
  if (before != nullptr)
    setenv("UCX_TLS", saved.c_str(), 1);
  else
    unsetenv("UCX_TLS");
  return pair;
}

// What the process writes to stdout and stderr (UCX logs to stdout) while `make` runs.
template <typename F>
std::string output_of(F make) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  const int saved_out = dup(1), saved_err = dup(2);
  dup2(fileno(capture), 1);
  dup2(fileno(capture), 2);
  make();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  std::string text;
  std::rewind(capture);
  for (int c; (c = std::fgetc(capture)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(capture);
  return text;
}

}  // namespace

TEST_CASE("endpoints over shared memory leave nothing behind a completed send; over TCP they may", "[transport]") {
  SECTION("shared memory (UCX_TLS=sm), without a warning about the TCP settings") {
    std::vector<std::unique_ptr<UcxTransport>> pair;
    const std::string warnings = output_of([&] { pair = connected_pair("sm"); });
    CHECK(warnings.find("invalid configuration") == std::string::npos);
    INFO(pair[0]->describe());
    CHECK_FALSE(pair[0]->sends_may_linger());
    CHECK_FALSE(pair[1]->sends_may_linger());
  }
  SECTION("TCP (UCX_TLS=tcp)") {
    auto pair = connected_pair("tcp");
    INFO(pair[0]->describe());
    CHECK(pair[0]->sends_may_linger());
    CHECK(pair[1]->sends_may_linger());
  }
  SECTION("a shut-down transport describes no lane, which counts as may") {
    auto pair = connected_pair("sm");
    pair[0]->shutdown(false);
    CHECK(pair[0]->sends_may_linger());
  }
}
