#include "core/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/env.h"
#include "base/error.h"

namespace bagua {

namespace {
// A 0/1 setting: left as it is when unset or empty, refused (naming it) when anything else.
void read_flag(const char* name, bool* value) {
  const char* text = env_get(name);
  if (text == nullptr || *text == '\0') return;
  if (std::strcmp(text, "0") != 0 && std::strcmp(text, "1") != 0)
    fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' must be 0 or 1", name, text);
  *value = text[0] == '1';
}

// FNV-1a: stable across builds and machines, unlike std::hash.
uint64_t fnv1a(uint64_t hash, const void* data, size_t len) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// A non-negative byte count from the environment into *out, when the variable is set.
void read_byte_count(const char* name, const char* zero_means, long long* out) {
  const char* text = env_get(name);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || !std::isdigit(static_cast<unsigned char>(text[0])) || errno == ERANGE)
    fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' must be a byte count ({})", name, text, zero_means);
  *out = v;
}
}  // namespace

bool parse_timeout_seconds(const std::string& text, int* timeout_ms) {
  if (text.empty()) return false;
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 86400.0 * 7)
    return false;
  *timeout_ms = std::max(1, static_cast<int>(std::lround(seconds * 1000)));
  return true;
}

Config Config::from_env() {
  Config config;
  if (const char* text = env_get("BAGUA_TIMEOUT"); text && *text) {
    if (!parse_timeout_seconds(text, &config.timeout_ms))
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_TIMEOUT='{}' is not a positive number of seconds", text);
  }
  read_flag("BAGUA_BIND", &config.bind_numa);
  read_flag("BAGUA_IDLE_PROGRESS", &config.idle_progress);
  if (const char* text = env_get("BAGUA_ALGO")) config.algo = text;
  if (const char* text = env_get("BAGUA_RING_SEGMENT"); text && *text) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*end != '\0' || v < 4096 || v > (1ull << 30))
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_RING_SEGMENT='{}' must be a byte count from 4096 to 2^30", text);
    config.ring_segment_bytes = static_cast<size_t>(v);
  }
  if (const char* text = env_get("BAGUA_SINGLE_COPY_MIN"); text && *text) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*end != '\0' || v < 1024)
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_SINGLE_COPY_MIN='{}' must be a byte count of at least 1024", text);
    config.single_copy_bytes = static_cast<size_t>(v);
  }
  if (const char* text = env_get("BAGUA_DEVICE_MEMORY_LIMIT"); text && *text) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*end != '\0' || v < (1ull << 20))
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_DEVICE_MEMORY_LIMIT='{}' must be a byte count of at least 1048576", text);
    config.device_memory_limit = static_cast<size_t>(v);
  }
  if (const char* text = env_get("BAGUA_IPC_CACHE_ENTRIES"); text && *text) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*end != '\0' || v < 1 || v > 1000000)
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_IPC_CACHE_ENTRIES='{}' must be a count from 1 to 1000000", text);
    config.ipc_cache_entries = static_cast<size_t>(v);
  }
  read_flag("BAGUA_PIPELINED_STAGING", &config.pipelined_staging);
  if (const char* text = env_get("BAGUA_DEVICE_DATA_PATH"); text && *text) {
    if (std::strcmp(text, "stream") != 0 && std::strcmp(text, "proxy") != 0)
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_DEVICE_DATA_PATH='{}' must be stream or proxy", text);
    config.device_path_on_stream = std::strcmp(text, "stream") == 0;
  }
  read_flag("BAGUA_DEVICE_TIMING", &config.device_timing);
  if (const char* text = env_get("BAGUA_INTER_HOST_GBPS"); text && *text) {
    char* end = nullptr;
    double v = std::strtod(text, &end);
    if (*end != '\0' || !(v > 0.001 && v < 100000))
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_INTER_HOST_GBPS='{}' must be a bandwidth in GB/s", text);
    config.inter_host_gbps = v;
  }
  read_byte_count("BAGUA_QUANTIZED_MIN_BYTES", "0: always quantize", &config.quantized_min_bytes);
  read_byte_count("BAGUA_QUANTIZED_ONE_ROUND_BYTES", "0: never", &config.quantized_one_round_bytes);
  if (const char* text = env_get("BAGUA_TRACE_SIZE"); text && *text) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*end != '\0' || !std::isdigit(static_cast<unsigned char>(text[0])) || v > 1000000)
      fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_TRACE_SIZE='{}' must be a number of operations from 0 to 1000000", text);
    config.trace_size = static_cast<size_t>(v);
  }
  if (const char* text = env_get("BAGUA_TRACE_DIR")) config.trace_dir = text;
  read_flag("BAGUA_FINGERPRINT", &config.fingerprints);
  if (const char* text = env_get("BAGUA_RING_WINDOW"); text && *text) {
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (*end != '\0' || v < 1 || v > 64) fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_RING_WINDOW='{}' must be 1 to 64", text);
    config.ring_window = static_cast<int>(v);
  }
  return config;
}

Config Config::from_user(const bagua_config_t* user) {
  if (user == nullptr) return from_env();
  if (user->magic != BAGUA_CONFIG_MAGIC)
    fail(BAGUA_ERR_INVALID_ARGUMENT,
         "config magic is {:#x}, expected {:#x}: initialize it with BAGUA_CONFIG_INITIALIZER", user->magic,
         BAGUA_CONFIG_MAGIC);
  if (user->size < kMinConfigSize || user->size > (1u << 20))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config size {} is not a bagua_config_t size (at least {})", user->size,
         kMinConfigSize);
  if (user->version < BAGUA_VERSION(0, 1, 0))
    fail(BAGUA_ERR_INVALID_ARGUMENT, "config version {} predates bagua_config_t", user->version);

  // Copy only what the caller's struct has; newer fields keep their initializer values.
  bagua_config_t merged = BAGUA_CONFIG_INITIALIZER;
  std::memcpy(&merged, user, std::min(user->size, sizeof(merged)));

  Config config = from_env();
  if (merged.timeout_ms != BAGUA_CONFIG_UNDEF_INT) {
    if (merged.timeout_ms <= 0)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "config timeout_ms {} must be positive", merged.timeout_ms);
    config.timeout_ms = merged.timeout_ms;
  }
  if (merged.bind_numa != BAGUA_CONFIG_UNDEF_INT) {
    if (merged.bind_numa != 0 && merged.bind_numa != 1)
      fail(BAGUA_ERR_INVALID_ARGUMENT, "config bind_numa {} must be 0 or 1", merged.bind_numa);
    config.bind_numa = merged.bind_numa == 1;
  }
  if (merged.comm_name != nullptr) config.comm_name = std::string(merged.comm_name, strnlen(merged.comm_name, 256));
  return config;
}

uint64_t Config::agreement_hash() const {
  uint64_t hash = 14695981039346656037ull;
  int version = BAGUA_VERSION_CODE;
  hash = fnv1a(hash, &version, sizeof(version));
  hash = fnv1a(hash, algo.data(), algo.size());
  hash = fnv1a(hash, &ring_segment_bytes, sizeof(ring_segment_bytes));
  hash = fnv1a(hash, &ring_window, sizeof(ring_window));
  hash = fnv1a(hash, &single_copy_bytes, sizeof(single_copy_bytes));
  hash = fnv1a(hash, &inter_host_gbps, sizeof(inter_host_gbps));
  hash = fnv1a(hash, &quantized_min_bytes, sizeof(quantized_min_bytes));
  hash = fnv1a(hash, &quantized_one_round_bytes, sizeof(quantized_one_round_bytes));
  hash = fnv1a(hash, &fingerprints, sizeof(fingerprints));
  return hash;
}

}  // namespace bagua
