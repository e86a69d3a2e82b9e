// libFuzzer target: the compression config (Codec::from_config) over every field value, size and version the
// caller may pass. An accepted config then compresses the finite floats that follow in the input into a buffer of
// exactly compressed_bytes (ASan catches a write past it) and decompresses them, and decompresses the same number
// of arbitrary bytes as a peer's wire data could be (headers with NaN, Inf or garbage). An Error is a refusal
// (fine) unless INTERNAL.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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
    const uint8_t* rest = data + std::min(size, sizeof cfg);
    const size_t rest_bytes = size - std::min(size, sizeof cfg);
    const size_t count = rest_bytes / sizeof(float);
    std::vector<float> x(count), error(count, 0.0f), back(count);
    if (count > 0) std::memcpy(x.data(), rest, count * sizeof(float));
    // What callers compress: finite values, within fp16's range when fp16 is the wire format.
    const float limit = cfg.kind == BAGUA_COMPRESS_FP16 ? 65504.0f : 1e30f;
    for (float& v : x)
      if (!std::isfinite(v) || std::fabs(v) > limit) v = 0.0f;
    std::vector<uint8_t> wire(codec.compressed_bytes(count));
    RoundingKey key;
    key.stochastic = cfg.stochastic != 0;
    key.seed = cfg.seed;
    codec.compress(x.data(), count, error.data(), key, wire.data());
    codec.decompress(wire.data(), count, back.data());
    for (size_t i = 0; i < count; ++i)
      if (!std::isfinite(back[i])) __builtin_trap();  // finite in, finite out
    // A peer's bytes: anything at all.
    std::vector<uint8_t> peer(codec.compressed_bytes(count));
    for (size_t i = 0; i < peer.size(); ++i) peer[i] = rest_bytes ? rest[i % rest_bytes] : 0;
    codec.decompress_accumulate(peer.data(), count, back.data());
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
  return 0;
}
