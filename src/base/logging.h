// Logging with fmt. The level is checked before anything is formatted.
// Each line names host, pid and rank: "[host:pid rank 3] bagua WARN: message".
#pragma once

#include <atomic>
#include <string>

#include <fmt/format.h>

namespace bagua {

enum class LogLevel : int { kNone = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

class Logger {
 public:
  static Logger& instance();
  bool enabled(LogLevel level) const { return static_cast<int>(level) <= level_.load(std::memory_order_relaxed); }
  void write(LogLevel level, const std::string& message);
  // Rereads BAGUA_LOG_LEVEL and BAGUA_LOG_FILE (tests call it after changing the environment).
  void configure_from_env();
  static bool parse_level(const std::string& text, LogLevel* level);

 private:
  Logger();
  std::atomic<int> level_{static_cast<int>(LogLevel::kWarn)};
  int fd_ = 2;
};

// The rank shown in log lines written by this thread (-1: none).
void set_log_rank(int rank);

// BAGUA_LOG_FILE expansion: %h host, %p pid, %% percent.
std::string expand_log_path(const std::string& pattern);

}  // namespace bagua

#define BAGUA_LOG(level, ...)                                               \
  do {                                                                      \
    if (::bagua::Logger::instance().enabled(level))                         \
      ::bagua::Logger::instance().write(level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define BAGUA_ERROR(...) BAGUA_LOG(::bagua::LogLevel::kError, __VA_ARGS__)
#define BAGUA_WARN(...) BAGUA_LOG(::bagua::LogLevel::kWarn, __VA_ARGS__)
#define BAGUA_INFO(...) BAGUA_LOG(::bagua::LogLevel::kInfo, __VA_ARGS__)
#define BAGUA_DEBUG(...) BAGUA_LOG(::bagua::LogLevel::kDebug, __VA_ARGS__)
#define BAGUA_TRACE(...) BAGUA_LOG(::bagua::LogLevel::kTrace, __VA_ARGS__)
