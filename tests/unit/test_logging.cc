// Logging: level parsing, the level check before formatting, BAGUA_LOG_FILE with %h and %p, and the
// host/pid/rank prefix on each line.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/logging.h"

using namespace bagua;

TEST_CASE("log levels parse case-insensitively", "[logging]") {
  LogLevel level;
  CHECK(Logger::parse_level("INFO", &level));
  CHECK(level == LogLevel::kInfo);
  CHECK(Logger::parse_level("trace", &level));
  CHECK(level == LogLevel::kTrace);
  CHECK_FALSE(Logger::parse_level("loud", &level));
}

TEST_CASE("BAGUA_LOG_FILE expands %h and %p", "[logging]") {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  CHECK(expand_log_path("/tmp/x-%h-%p.log") == "/tmp/x-" + std::string(host) + "-" + std::to_string(getpid()) + ".log");
  CHECK(expand_log_path("100%%") == "100%");
}

TEST_CASE("lines go to the file with host, pid and rank, and the level is checked first", "[logging]") {
  std::string path = "/tmp/bagua-log-test-%p.log";
  std::string real = expand_log_path(path);
  unlink(real.c_str());
  setenv("BAGUA_LOG_FILE", path.c_str(), 1);
  setenv("BAGUA_LOG_LEVEL", "info", 1);
  Logger::instance().configure_from_env();
  set_log_rank(7);
  int formatted = 0;
  auto counted = [&] {
    ++formatted;
    return 1;
  };
  BAGUA_INFO("hello {}", counted());
  BAGUA_DEBUG("hidden {}", counted());  // below the level: never formatted
  set_log_rank(-1);
  unsetenv("BAGUA_LOG_FILE");
  unsetenv("BAGUA_LOG_LEVEL");
  Logger::instance().configure_from_env();
  CHECK(formatted == 1);
  std::ifstream in(real);
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains(":" + std::to_string(getpid()) + " rank 7] bagua INFO: hello 1"));
  CHECK_THAT(text.str(), !Catch::Contains("hidden"));
  unlink(real.c_str());
}
