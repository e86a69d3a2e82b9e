// bagua_config_t validation, NCCL-style: magic and size first; an older caller's smaller struct works. The
// environment table (base/env.h).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "base/env.h"
#include "base/error.h"
#include "core/config.h"

using namespace bagua;

namespace {
bagua_status_t status_of(const bagua_config_t* config) {
  try {
    Config::from_user(config);
    return BAGUA_SUCCESS;
  } catch (const Error& e) {
    return e.status();
  }
}
}  // namespace

TEST_CASE("the initializer gives the defaults", "[config]") {
  unsetenv("BAGUA_TIMEOUT");
  bagua_config_t user = BAGUA_CONFIG_INITIALIZER;
  Config config = Config::from_user(&user);
  CHECK(config.timeout_ms == 30000);
  CHECK_FALSE(config.bind_numa);
  CHECK(Config::from_user(nullptr).timeout_ms == 30000);
}

TEST_CASE("set fields override the environment", "[config]") {
  setenv("BAGUA_TIMEOUT", "2.5", 1);
  bagua_config_t user = BAGUA_CONFIG_INITIALIZER;
  CHECK(Config::from_user(&user).timeout_ms == 2500);
  user.timeout_ms = 700;
  user.comm_name = "grads";
  Config config = Config::from_user(&user);
  CHECK(config.timeout_ms == 700);
  CHECK(config.comm_name == "grads");
  unsetenv("BAGUA_TIMEOUT");
}

TEST_CASE("a caller built against an older, smaller struct still works", "[config]") {
  // An old caller knew only size/magic/version/timeout_ms; the bytes after are not theirs.
  struct OldConfig {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int timeout_ms;
  };
  unsigned char storage[sizeof(bagua_config_t)];
  std::memset(storage, 0xEE, sizeof(storage));  // garbage where newer fields would be
  // Its size is where its last field ends; anything past that (tail padding included) is not the library's.
  OldConfig old{kMinConfigSize, BAGUA_CONFIG_MAGIC, BAGUA_VERSION(0, 1, 0), 1234};
  std::memcpy(storage, &old, sizeof(old));
  Config config = Config::from_user(reinterpret_cast<const bagua_config_t*>(storage));
  CHECK(config.timeout_ms == 1234);
  CHECK_FALSE(config.bind_numa);  // not read from the garbage
  CHECK(config.comm_name.empty());
}

TEST_CASE("bad configs are invalid arguments", "[config]") {
  bagua_config_t user = BAGUA_CONFIG_INITIALIZER;
  SECTION("bad magic") {
    user.magic = 0;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
  SECTION("size too small") {
    user.size = 8;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
  SECTION("absurd size") {
    user.size = size_t(1) << 40;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
  SECTION("version before the struct existed") {
    user.version = 5;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
  SECTION("non-positive timeout") {
    user.timeout_ms = 0;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
  SECTION("bind_numa not 0 or 1") {
    user.bind_numa = 7;
    CHECK(status_of(&user) == BAGUA_ERR_INVALID_ARGUMENT);
  }
}

TEST_CASE("BAGUA_TIMEOUT parsing", "[config]") {
  int ms = 0;
  CHECK(parse_timeout_seconds("30", &ms));
  CHECK(ms == 30000);
  CHECK(parse_timeout_seconds("0.25", &ms));
  CHECK(ms == 250);
  CHECK_FALSE(parse_timeout_seconds("", &ms));
  CHECK_FALSE(parse_timeout_seconds("-1", &ms));
  CHECK_FALSE(parse_timeout_seconds("10s", &ms));
  CHECK_FALSE(parse_timeout_seconds("nan", &ms));
  setenv("BAGUA_TIMEOUT", "soon", 1);
  CHECK_THROWS_WITH(Config::from_env(), Catch::Contains("BAGUA_TIMEOUT"));
  unsetenv("BAGUA_TIMEOUT");
}

TEST_CASE("quantized byte counts: parsed, refused with the variable named, and agreed at init", "[config]") {
  for (const char* name : {"BAGUA_QUANTIZED_MIN_BYTES", "BAGUA_QUANTIZED_ONE_ROUND_BYTES"}) {
    CAPTURE(name);
    setenv(name, "0", 1);
    Config zero = Config::from_env();
    setenv(name, "262144", 1);
    Config some = Config::from_env();
    CHECK(zero.agreement_hash() != some.agreement_hash());
    for (const char* bad : {"-1", "1k", "abc", "99999999999999999999"}) {
      setenv(name, bad, 1);
      CHECK_THROWS_WITH(Config::from_env(), Catch::Contains(name) && Catch::Contains("byte count"));
    }
    unsetenv(name);
  }
  setenv("BAGUA_QUANTIZED_ONE_ROUND_BYTES", "4096", 1);
  CHECK(Config::from_env().quantized_one_round_bytes == 4096);
  unsetenv("BAGUA_QUANTIZED_ONE_ROUND_BYTES");
  CHECK(Config::from_env().quantized_one_round_bytes == -1);
}

TEST_CASE("0/1 settings: unset or empty keep the default, anything else is refused with the variable named",
          "[config]") {
  for (const char* name : {"BAGUA_IDLE_PROGRESS", "BAGUA_BIND", "BAGUA_PIPELINED_STAGING", "BAGUA_FINGERPRINT"}) {
    CAPTURE(name);
    for (const char* bad : {"2", "yes", "01", " 1"}) {
      setenv(name, bad, 1);
      CHECK_THROWS_WITH(Config::from_env(), Catch::Contains(name) && Catch::Contains("must be 0 or 1"));
    }
    unsetenv(name);
  }
  CHECK(Config::from_env().idle_progress);
  setenv("BAGUA_IDLE_PROGRESS", "", 1);
  CHECK(Config::from_env().idle_progress);
  setenv("BAGUA_IDLE_PROGRESS", "0", 1);
  CHECK_FALSE(Config::from_env().idle_progress);
  setenv("BAGUA_IDLE_PROGRESS", "1", 1);
  CHECK(Config::from_env().idle_progress);
  unsetenv("BAGUA_IDLE_PROGRESS");
}

TEST_CASE("the agreement hash follows BAGUA_ALGO", "[config]") {
  Config a, b;
  CHECK(a.agreement_hash() == b.agreement_hash());
  b.algo = "allreduce:ring";
  CHECK(a.agreement_hash() != b.agreement_hash());
}

TEST_CASE("environment variables are read only through the one table", "[config]") {
  std::set<std::string> names;
  for (const EnvSetting& e : env_settings()) {
    CHECK(names.insert(e.name).second);
    CHECK(std::string(e.meaning).size() > 0);
  }
  CHECK(names.count("BAGUA_TIMEOUT") == 1);
  setenv("BAGUA_TIMEOUT", "", 1);
  CHECK(env_get("BAGUA_TIMEOUT") != nullptr);
  CHECK(env_get_nonempty("BAGUA_TIMEOUT") == nullptr);
  unsetenv("BAGUA_TIMEOUT");
  try {
    env_get("BAGUA_NOT_IN_THE_TABLE");
    FAIL("an unlisted variable was read");
  } catch (const Error& e) {
    CHECK(e.status() == BAGUA_ERR_INTERNAL);
  }
}
