// Every environment variable bagua reads, in one table: the code reads them only through env_get(), which refuses
// a name the table lacks, and `bagua-info` prints the table with the values set (docs/environment.md).
#pragma once

#include <span>

namespace bagua {

struct EnvSetting {
  const char* name;
  const char* meaning;
  const char* who;  // "launcher" (set by bagua-run and the like), "user", "torchrun", "Open MPI", "Slurm", ...
};

std::span<const EnvSetting> env_settings();
// The variable's value, or nullptr when unset. A name missing from the table is an INTERNAL error.
const char* env_get(const char* name);
// As env_get, but nullptr for an empty value too.
const char* env_get_nonempty(const char* name);

}  // namespace bagua
