// libFuzzer target: BAGUA_ALGO's grammar (AlgorithmSelector) and byte sizes; a spec that parses must give an
// algorithm for every collective, size and rank count. An Error is a refusal (fine) unless INTERNAL.
#include <cstdint>
#include <string>

#include "algorithms/registry.h"
#include "algorithms/selection.h"
#include "base/error.h"

using namespace bagua;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string spec(reinterpret_cast<const char*>(data), size);
  size_t bytes = 0;
  parse_byte_size(spec, &bytes);
  try {
    AlgorithmSelector selector(spec, 1.25, (size & 1) != 0);
    for (int k = 0; k < static_cast<int>(Collective::kCount); ++k)
      for (size_t b : {size_t{0}, size_t{4096}, size_t{1} << 20, bytes})
        for (int n : {1, 2, 3, 8}) {
          const Collective c = static_cast<Collective>(k);
          if (selector.choose(c, b, n) == nullptr) __builtin_trap();
          selector.explain(c, b, n);
        }
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
  return 0;
}
