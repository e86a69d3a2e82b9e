// Every compression kernel writes NaN as the canonical quiet NaN 0x7fc00000 (docs/formats.md), whatever NaN or
// Inf its inputs held: NVIDIA's arithmetic returns that NaN, x86 keeps an operand's bits, so without this the CPU
// and CUDA kernels differ. Oracle: each output element is either not a NaN or exactly 0x7fc00000; which elements
// are NaN follows the formats' rules (a poisoned min-max chunk decompresses to NaN everywhere; sign and BAGUA's
// u8 layout spread a non-finite input through their scale). ctest runs these cases once per CPU path
// (BAGUA_CPU_KERNELS=scalar, avx2, and the best this CPU has), which switches the hand-written AVX-512 loops.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/half.h"
#include "kernels/quantize.h"

using namespace bagua;

namespace {

// NaNs with other payloads and signs than the canonical one, and infinities.
const uint32_t kOddValues[] = {0x7fffffffu, 0xffc00000u, 0x7fa00001u, 0xffffffffu, 0x7f800000u, 0xff800000u};

std::vector<float> with_specials(size_t n, size_t chunk, uint32_t special) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 37) % 101) / 7.0f - 7.0f;
  // One special in the second chunk; the first and third chunks stay finite.
  x[chunk + 5] = bits_float(special);
  return x;
}

// Counts NaNs and fails on any non-canonical one.
size_t count_nans(const std::vector<float>& v, const std::string& what) {
  size_t nans = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits = float_bits(v[i]);
    if (v[i] != v[i]) {
      ++nans;
      INFO(what << " element " << i << " bits 0x" << std::hex << bits);
      REQUIRE(bits == 0x7fc00000u);
    }
  }
  return nans;
}

}  // namespace

TEST_CASE("min-max kernels write only the canonical NaN", "[canonical_nan]") {
  INFO("CPU kernels: " << cpu_kernels_name(cpu_kernels()));
  for (uint32_t special : kOddValues)
    for (int bits : {1, 2, 4, 8})
      for (size_t chunk : {256, 1024}) {
        MinMaxFormat f{bits, chunk};
        const size_t n = 3 * chunk;
        std::vector<float> x = with_specials(n, chunk, special);
        for (bool stochastic : {false, true}) {
          RoundingKey key{stochastic, 7, 1, 0, 0};
          std::vector<uint8_t> packed(minmax_compressed_bytes(n, f));
          minmax_compress(x.data(), BAGUA_FLOAT32, n, f, key, packed.data());
          // The poisoned chunk's header holds the canonical NaN.
          float lo;
          std::memcpy(&lo, packed.data() + minmax_compressed_bytes(chunk, f), 4);
          CHECK(float_bits(lo) == 0x7fc00000u);
          std::vector<float> out(n);
          minmax_decompress(packed.data(), n, f, out.data(), BAGUA_FLOAT32);
          CHECK(count_nans(out, "decompress") == chunk);
          // Accumulating into an accumulator that holds odd NaNs of its own.
          std::vector<float> acc(n, 1.0f);
          acc[3] = bits_float(0x7fffffffu);
          acc[2 * chunk + 9] = bits_float(0xffc00000u);
          minmax_decompress_accumulate(packed.data(), n, f, acc.data());
          CHECK(count_nans(acc, "decompress-accumulate") == chunk + 2);
          // Error feedback: a residual that would be Inf or NaN is kept as 0 (docs/formats.md), in the poisoned chunk
          // and in the one that an odd NaN already in the error poisons.
          std::vector<float> error(n, 0.0f);
          error[2 * chunk] = bits_float(0x7fa00001u);  // an odd NaN already in the error of a finite chunk
          minmax_compress_ef(x.data(), BAGUA_FLOAT32, n, error.data(), f, key, packed.data());
          CHECK(count_nans(error, "error feedback") == 0);
          CHECK(std::all_of(error.begin(), error.end(), [](float e) { return std::isfinite(e); }));
          // The fused owner step: reduced and the owner's error.
          std::vector<float> own(n, 0.5f), reduced(n), owner_error(n, 0.0f);
          own[7] = bits_float(0xffffffffu);
          const uint8_t* inputs[] = {packed.data(), packed.data()};
          std::vector<uint8_t> recompressed(packed.size());
          minmax_reduce_recompress(inputs, 2, own.data(), n, f, key, owner_error.data(), recompressed.data(),
                                   reduced.data());
          CHECK(count_nans(reduced, "owner step, reduced") >= chunk);
          count_nans(owner_error, "owner step, error");
        }
      }
}

TEST_CASE("sign and BAGUA u8 kernels write only the canonical NaN", "[canonical_nan]") {
  INFO("CPU kernels: " << cpu_kernels_name(cpu_kernels()));
  for (uint32_t special : kOddValues)
    for (size_t chunk : {256, 1000}) {
      const size_t n = 3 * chunk;
      std::vector<float> x = with_specials(n, chunk, special);
      std::vector<uint8_t> packed(sign_compressed_bytes(n, chunk));
      std::vector<float> error(n, 0.0f);
      sign_compress(x.data(), n, chunk, error.data(), packed.data());
      CHECK(count_nans(error, "sign error feedback") == 0);
      CHECK(std::all_of(error.begin(), error.end(), [](float e) { return std::isfinite(e); }));
      std::vector<float> out(n), acc(n, 2.0f);
      acc[1] = bits_float(0x7fffffffu);
      sign_decompress(packed.data(), n, chunk, out.data());
      count_nans(out, "sign decompress");
      sign_decompress_accumulate(packed.data(), n, chunk, acc.data());
      count_nans(acc, "sign decompress-accumulate");
      std::vector<uint8_t> u8(bagua_u8_compressed_bytes(n));
      std::vector<float> x0 = x;
      x0[0] = bits_float(special);  // BAGUA's layout takes its range from x[0] first
      bagua_u8_compress(x0.data(), n, u8.data());
      bagua_u8_decompress(u8.data(), n, out.data());
      count_nans(out, "bagua u8 decompress");
    }
}

TEST_CASE("the fp16/bf16 wire with error feedback sends only the canonical NaN", "[canonical_nan]") {
  const size_t n = 3000, chunk = 1024;
  for (bagua_compress_kind_t kind : {BAGUA_COMPRESS_FP16, BAGUA_COMPRESS_BF16}) {
    const CompressionSpec spec{kind, {8, chunk}};
    const uint16_t canonical = kind == BAGUA_COMPRESS_FP16 ? 0x7e00 : 0x7fc0;
    for (uint32_t special : kOddValues) {
      std::vector<float> x = with_specials(n, chunk, special), error(n, 0.25f);
      std::vector<uint16_t> wire(n);
      compress_floats(spec, x.data(), n, error.data(), RoundingKey{}, reinterpret_cast<uint8_t*>(wire.data()));
      INFO("kind " << kind << " special 0x" << std::hex << special);
      const bool nan_input = (special & 0x7fffffffu) > 0x7f800000u;
      if (nan_input) REQUIRE(wire[chunk + 5] == canonical);
      REQUIRE(error[chunk + 5] == 0.0f);  // a non-finite residual is stored as 0
      std::vector<float> acc(n, 1.0f);
      decompress_accumulate_floats(spec, reinterpret_cast<const uint8_t*>(wire.data()), n, acc.data());
      REQUIRE(count_nans(acc, "accumulated") == (nan_input ? 1u : 0u));
    }
  }
}

TEST_CASE("the gossip difference writes only the canonical NaN", "[canonical_nan]") {
  const size_t n = 2000;
  for (uint32_t special : kOddValues) {
    std::vector<float> x = with_specials(n, 512, special), self(n, 0.5f), left(n, -0.25f), right(n, 1.5f), diff(n);
    self[7] = bits_float(special);
    const float* replicas[2] = {left.data(), right.data()};
    const float weights[2] = {1.0f / 3, 1.0f / 3};
    gossip_difference(diff.data(), x.data(), self.data(), replicas, weights, 2, 1.0f / 3, n);
    INFO("special 0x" << std::hex << special);
    REQUIRE(count_nans(diff, "difference") >= 1);  // element 7 at least (Inf - Inf or a NaN)
  }
}
