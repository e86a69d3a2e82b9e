#include "base/logging.h"
#include "base/env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace bagua {

namespace {
thread_local int t_log_rank = -1;

const char* level_label(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

void set_log_rank(int rank) { t_log_rank = rank; }

std::string expand_log_path(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h')
        out += host_name();
      else if (c == 'p')
        out += std::to_string(getpid());
      else if (c == '%')
        out += '%';
      else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

bool Logger::parse_level(const std::string& text, LogLevel* level) {
  static const struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"none", LogLevel::kNone}, {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
                 {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}, {"trace", LogLevel::kTrace}};
  for (const auto& entry : kLevels) {
    if (strcasecmp(text.c_str(), entry.name) == 0) {
      *level = entry.level;
      return true;
    }
  }
  return false;
}

Logger& Logger::instance() {
  static Logger* logger = new Logger();  // never destroyed: usable from exit handlers
  return *logger;
}

Logger::Logger() { configure_from_env(); }

void Logger::configure_from_env() {
  LogLevel level = LogLevel::kWarn;
  const char* text = env_get("BAGUA_LOG_LEVEL");
  bool bad_level = text && *text && !parse_level(text, &level);
  level_.store(static_cast<int>(level));
  if (fd_ != 2) close(fd_);
  fd_ = 2;
  if (const char* file = env_get("BAGUA_LOG_FILE"); file && *file) {
    std::string path = expand_log_path(file);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0)
      fd_ = fd;
    else
      write(LogLevel::kWarn, fmt::format("cannot open BAGUA_LOG_FILE '{}': {}", path, std::strerror(errno)));
  }
  if (bad_level)
    write(LogLevel::kWarn,
          fmt::format("BAGUA_LOG_LEVEL='{}' is not one of none, error, warn, info, debug, trace", text));
}

void Logger::write(LogLevel level, const std::string& message) {
  static const std::string host = host_name();
  std::string rank = t_log_rank >= 0 ? fmt::format(" rank {}", t_log_rank) : std::string();
  std::string line = fmt::format("[{}:{}{}] bagua {}: {}\n", host, getpid(), rank, level_label(level), message);
  // One write() per line keeps lines from different processes whole.
  ssize_t ignored = ::write(fd_, line.data(), line.size());
  (void)ignored;
}

}  // namespace bagua
