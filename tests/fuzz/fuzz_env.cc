// libFuzzer target: environment parsing. Input: lines NAME=VALUE; the BAGUA_* ones are set (the rest of the
// process environment is cleared of them first), then the communicator configuration (Config::from_env) and the
// launcher variables (read_launch_env, over the same lines) are parsed. An Error is a refusal (fine) unless INTERNAL.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "base/error.h"
#include "bootstrap/launch_env.h"
#include "core/config.h"

using namespace bagua;

namespace {
const char* const kConfigNames[] = {"BAGUA_TIMEOUT",
                                    "BAGUA_BIND",
                                    "BAGUA_IDLE_PROGRESS",
                                    "BAGUA_ALGO",
                                    "BAGUA_RING_SEGMENT",
                                    "BAGUA_SINGLE_COPY_MIN",
                                    "BAGUA_DEVICE_MEMORY_LIMIT",
                                    "BAGUA_INTER_HOST_GBPS",
                                    "BAGUA_QUANTIZED_MIN_BYTES",
                                    "BAGUA_QUANTIZED_ONE_ROUND_BYTES",
                                    "BAGUA_PIPELINED_STAGING",
                                    "BAGUA_TRACE_SIZE",
                                    "BAGUA_TRACE_DIR",
                                    "BAGUA_RING_WINDOW"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> vars;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos && line.find('\0') == std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  for (const char* name : kConfigNames) {
    auto it = vars.find(name);
    if (it == vars.end())
      unsetenv(name);
    else
      setenv(name, it->second.c_str(), 1);
  }
  try {
    Config::from_env();
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
  try {
    read_launch_env([&](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
  return 0;
}
