// Min-max quantization (docs/formats.md "minmax v1"), CPU reference.
// Oracles: the per-chunk error bound (max-min)/(2^b-1)/2 + 2 ulp(max|x|) for nearest rounding; exact
// reproduction of constant chunks; the documented byte layout; unbiasedness of stochastic rounding (the mean
// of N draws is within 5 standard errors of x); error feedback telescoping (sum of sent values plus the final
// error equals the sum of inputs, within float rounding of the sums).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "algorithms/quantized/codec.h"
#include "base/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kernels/quantize_math.h"

using namespace bagua;

namespace {
std::vector<float> random_vector(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

float ulp(float x) { return std::nextafter(std::fabs(x), std::numeric_limits<float>::infinity()) - std::fabs(x); }

// Checks the bound chunk by chunk; returns the worst error relative to the allowed one.
double worst_relative_error(const std::vector<float>& x, const std::vector<float>& y, size_t chunk, int bits) {
  double worst = 0;
  for (size_t b = 0; b < x.size(); b += chunk) {
    size_t e = std::min(x.size(), b + chunk);
    float lo = x[b], hi = x[b], amax = 0;
    for (size_t i = b; i < e; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    double allowed = (static_cast<double>(hi) - lo) / ((1 << bits) - 1) / 2 + 2 * ulp(amax);
    for (size_t i = b; i < e; ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]) / allowed);
  }
  return worst;
}
}  // namespace

TEST_CASE("nearest rounding stays within half a step plus 2 ulp, every bits and chunk", "[quantize]") {
  for (int bits : {1, 2, 4, 8})
    for (size_t chunk : {size_t(256), size_t(1000), size_t(4096)})
      for (float scale : {1e-3f, 1.0f, 1e4f}) {
        std::vector<float> x = random_vector(10007, scale, bits * 7 + static_cast<uint32_t>(chunk));
        MinMaxFormat f{bits, chunk};
        std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
        minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
        std::vector<float> y(x.size());
        minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
        INFO("bits " << bits << " chunk " << chunk << " scale " << scale);
        CHECK(worst_relative_error(x, y, chunk, bits) <= 1.0);
      }
}

TEST_CASE("fp16 and bf16 inputs and outputs", "[quantize]") {
  std::vector<float> x = random_vector(3000, 2.0f, 5);
  for (bagua_datatype_t t : {BAGUA_FLOAT16, BAGUA_BFLOAT16}) {
    std::vector<uint16_t> in(x.size());
    for (size_t i = 0; i < x.size(); ++i) in[i] = t == BAGUA_FLOAT16 ? float_to_fp16(x[i]) : float_to_bf16(x[i]);
    std::vector<float> exact(x.size());
    for (size_t i = 0; i < x.size(); ++i) exact[i] = t == BAGUA_FLOAT16 ? fp16_to_float(in[i]) : bf16_to_float(in[i]);
    MinMaxFormat f{8, 512};
    std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
    minmax_compress(in.data(), t, x.size(), f, RoundingKey{}, q.data());
    std::vector<float> y(x.size());
    minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
    CHECK(worst_relative_error(exact, y, 512, 8) <= 1.0);
  }
}

TEST_CASE("constant and zero-length chunks", "[quantize]") {
  MinMaxFormat f{4, 256};
  std::vector<float> x(700, 3.25f);
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
  std::vector<float> y(x.size(), 0.0f);
  minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
  CHECK(y == x);
  CHECK(minmax_compressed_bytes(0, f) == 0);
  minmax_compress(nullptr, BAGUA_FLOAT32, 0, f, RoundingKey{}, nullptr);  // nothing to do, nothing touched
}

TEST_CASE("byte layout: f32 min and max, then codes LSB-first, 4-byte aligned blocks", "[quantize]") {
  MinMaxFormat f{2, 256};
  std::vector<float> x(256, 0.0f);
  x[0] = 0.0f;  // code 0
  x[1] = 1.0f;  // code 1
  x[2] = 2.0f;  // code 2
  x[3] = 3.0f;  // code 3: min 0, max 3, step 1
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
  REQUIRE(q.size() == 8 + 64);
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
  float lo, hi;
  std::memcpy(&lo, q.data(), 4);
  std::memcpy(&hi, q.data() + 4, 4);
  CHECK(lo == 0.0f);
  CHECK(hi == 3.0f);
  CHECK(q[8] == 0xE4);  // codes 0,1,2,3 from the low bits up: 00 01 10 11 -> 0b11100100
  CHECK(minmax_compressed_bytes(257, f) == 8 + 64 + 8 + 4);  // a 1-element tail block, padded to 4 bytes
}

TEST_CASE("a chunk whose range overflows float gets code 0 everywhere (no float-to-int of NaN)", "[quantize]") {
  MinMaxFormat f{8, 256};
  std::vector<float> x(256, 0.0f);
  x[0] = -3e38f;
  x[1] = 3e38f;  // max - min is infinite: step 0, and (x - min) * 0 is NaN for x[1]
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
  for (size_t i = 8; i < q.size(); ++i) REQUIRE(q[i] == 0);
}

TEST_CASE("non-finite input poisons its chunk and only its chunk", "[quantize]") {
  MinMaxFormat f{8, 256};
  std::vector<float> x = random_vector(512, 1.0f, 9);
  x[300] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
  std::vector<float> y(x.size());
  minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
  for (size_t i = 0; i < 256; ++i) REQUIRE(std::isfinite(y[i]));
  for (size_t i = 256; i < 512; ++i) REQUIRE(std::isnan(y[i]));
}

TEST_CASE("stochastic rounding is unbiased and reproducible", "[quantize]") {
  MinMaxFormat f{2, 256};
  std::vector<float> x = random_vector(256, 1.0f, 11);
  const int draws = 4000;
  std::vector<double> mean(x.size(), 0.0);
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f)), again(q.size());
  std::vector<float> y(x.size());
  float step = 0;
  for (int s = 0; s < draws; ++s) {
    RoundingKey key{true, 1234, static_cast<uint64_t>(s), 3, 0};
    minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, key, q.data());
    if (s == 0) {
      minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, key, again.data());
      CHECK(q == again);  // same key, same codes
      float lo, hi;
      std::memcpy(&lo, q.data(), 4);
      std::memcpy(&hi, q.data() + 4, 4);
      step = (hi - lo) / 3;
    }
    minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
    for (size_t i = 0; i < x.size(); ++i) mean[i] += y[i];
  }
  // Each draw is x's neighbouring grid point; its standard deviation is at most step/2.
  double se = step / 2 / std::sqrt(static_cast<double>(draws));
  size_t outside = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(mean[i] / draws - x[i]) > 5 * se + 1e-6) ++outside;
  CHECK(outside == 0);
}

TEST_CASE("stochastic codes follow the documented draw, across a 2^32 index boundary", "[quantize]") {
  // Oracle: docs/formats.md, element by element: t = (x - min) * ((2^b - 1) / (max - min)), code =
  // stochastic_code(t, r) with r = rounding_draw16(seed, step, rank, index) (the functions the CUDA kernel calls).
  for (int bits : {1, 2, 4, 8}) {
    MinMaxFormat f{bits, 512};
    std::vector<float> x = random_vector(1000, 3.0f, 17 + static_cast<uint32_t>(bits));
    RoundingKey key{true, 0xfeed, 42, 3, (uint64_t{1} << 32) - 700};  // the second chunk crosses 2^32
    std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
    minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, key, q.data());
    const uint8_t* block = q.data();
    for (size_t begin = 0; begin < x.size(); begin += f.chunk) {
      size_t len = std::min(f.chunk, x.size() - begin);
      float lo, hi;
      std::memcpy(&lo, block, 4);
      std::memcpy(&hi, block + 4, 4);
      const float levels = static_cast<float>((1u << bits) - 1), inv = levels / (hi - lo);
      for (size_t i = 0; i < len; ++i) {
        float t = (x[begin + i] - lo) * inv;
        int32_t r = stochastic_code(t, rounding_draw16(key.seed, key.step, key.rank, key.index_base + begin + i),
                                    static_cast<int32_t>(levels));
        const size_t per_byte = 8 / static_cast<size_t>(bits);
        uint32_t code = (block[8 + i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);
        INFO("bits " << bits << " element " << begin + i);
        REQUIRE(code == static_cast<uint32_t>(r));
      }
      block += minmax_compressed_bytes(len, f);
    }
  }
}

TEST_CASE("draw v3 is the one docs/formats.md describes, and its draws are uniform", "[quantize]") {
  // Oracle: the text of docs/formats.md, written out here without the library's helpers: SplitMix64's finalizer
  // for the key, then one hash per pair (elements i and i + 16 of each aligned block of 32), low half for the first.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto documented = [&](uint64_t seed, uint64_t step, uint32_t rank, uint64_t index) {
    const uint32_t key = static_cast<uint32_t>(
        mix(seed ^ mix(step ^ mix((static_cast<uint64_t>(rank) << 40) ^ mix(index >> 32)))) >> 32);
    const uint32_t i = static_cast<uint32_t>(index);
    uint32_t x = (((i >> 5) << 4) | (i & 15u)) + key;
    x *= 0x21f0aaadu;
    x ^= x >> 15;
    x *= 0x735a2d97u;
    x ^= x >> 15;
    return (i & 16u) ? x >> 16 : x & 0xffffu;
  };
  const RoundingKey key{true, 0x5eed, 77, 6, 0};
  for (uint64_t base : {uint64_t{0}, uint64_t{13}, (uint64_t{1} << 32) - 40, uint64_t{0xfffffffffffffff0ull}})
    for (uint64_t k = 0; k < 80; ++k) {
      INFO("index " << base + k);
      REQUIRE(stochastic_draw(key, base + k) == documented(key.seed, key.step, key.rank, base + k));
    }
  // Uniform: over 2^20 consecutive indices the mean of r / 2^16 is within 5 standard errors of 1/2, and each of
  // 256 bins of r holds its share within 5 standard deviations (binomial).
  const size_t n = size_t{1} << 20;
  std::vector<size_t> bins(256, 0);
  double sum = 0;
  size_t out_of_range = 0;
  for (size_t k = 0; k < n; ++k) {
    uint32_t r = stochastic_draw(key, k);
    out_of_range += r >= 65536u;
    sum += r / 65536.0;
    ++bins[(r >> 8) & 255u];
  }
  CHECK(out_of_range == 0);
  CHECK(std::fabs(sum / n - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  const double expected = n / 256.0, sd = std::sqrt(expected * (1 - 1 / 256.0));
  for (size_t b = 0; b < bins.size(); ++b) {
    INFO("bin " << b);
    CHECK(std::fabs(static_cast<double>(bins[b]) - expected) < 5 * sd);
  }
}

TEST_CASE("error feedback telescopes", "[quantize]") {
  MinMaxFormat f{1, 256};
  const size_t n = 1024;
  std::vector<float> error(n, 0.0f), deq(n);
  std::vector<double> sent(n, 0.0), inputs(n, 0.0);
  std::vector<uint8_t> q(minmax_compressed_bytes(n, f));
  for (int t = 0; t < 50; ++t) {
    std::vector<float> x = random_vector(n, 1.0f, 100 + t);
    minmax_compress_ef(x.data(), BAGUA_FLOAT32, n, error.data(), f, RoundingKey{}, q.data());
    minmax_decompress(q.data(), n, f, deq.data(), BAGUA_FLOAT32);
    for (size_t i = 0; i < n; ++i) {
      sent[i] += deq[i];
      inputs[i] += x[i];
    }
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + error[i] - inputs[i]));
  CHECK(worst < 1e-3);  // 50 float additions of values around 1
}

TEST_CASE("decompress-accumulate adds the dequantized values", "[quantize]") {
  MinMaxFormat f{8, 1024};
  std::vector<float> x = random_vector(5000, 1.0f, 3), y(5000), acc(5000, 1.5f);
  std::vector<uint8_t> q(minmax_compressed_bytes(x.size(), f));
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, q.data());
  minmax_decompress(q.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
  minmax_decompress_accumulate(q.data(), x.size(), f, acc.data());
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(acc[i] == 1.5f + y[i]);
}

TEST_CASE("bad formats and datatypes are invalid arguments", "[quantize]") {
  float x = 0;
  uint8_t out[64];
  CHECK_THROWS_AS(minmax_compressed_bytes(10, MinMaxFormat{3, 256}), Error);
  CHECK_THROWS_AS(minmax_compressed_bytes(10, MinMaxFormat{8, 100}), Error);
  CHECK_THROWS_AS(minmax_compressed_bytes(10, MinMaxFormat{8, 8192}), Error);
  CHECK_THROWS_AS(minmax_compress(&x, BAGUA_INT32, 1, MinMaxFormat{}, RoundingKey{}, out), Error);
}

TEST_CASE("fused owner step equals decompress-accumulate then compress", "[quantize]") {
  MinMaxFormat f{4, 512};
  const size_t n = 2000;
  std::vector<float> own = random_vector(n, 1.0f, 21);
  std::vector<std::vector<uint8_t>> peers;
  for (int p = 0; p < 3; ++p) {
    std::vector<float> x = random_vector(n, 1.0f, 30 + p);
    peers.emplace_back(minmax_compressed_bytes(n, f));
    minmax_compress(x.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, peers.back().data());
  }
  std::vector<float> acc = own;
  for (auto& q : peers) minmax_decompress_accumulate(q.data(), n, f, acc.data());
  std::vector<uint8_t> want(minmax_compressed_bytes(n, f)), got(want.size());
  minmax_compress(acc.data(), BAGUA_FLOAT32, n, f, RoundingKey{}, want.data());
  const uint8_t* inputs[3] = {peers[0].data(), peers[1].data(), peers[2].data()};
  std::vector<float> reduced(n);
  minmax_reduce_recompress(inputs, 3, own.data(), n, f, RoundingKey{}, nullptr, got.data(), reduced.data());
  CHECK(got == want);
  CHECK(reduced == acc);
  // With the owner's error feedback, the same as compress_ef on the reduced values.
  std::vector<float> e1(n, 0.25f), e2(n, 0.25f);
  minmax_compress_ef(acc.data(), BAGUA_FLOAT32, n, e1.data(), f, RoundingKey{}, want.data());
  minmax_reduce_recompress(inputs, 3, own.data(), n, f, RoundingKey{}, e2.data(), got.data(), nullptr);
  CHECK(got == want);
  CHECK(e1 == e2);
}

TEST_CASE("Codec's fused owner step gives the bytes and residuals of the unfused steps, every format", "[quantize]") {
  // Oracle: copy own, decompress-accumulate each input in order, compress with the owner's error feedback (what the
  // device path runs). Counts span several fused slices and end mid-chunk; stochastic keys start mid-vector.
  struct Case {
    bagua_compress_kind_t kind;
    int bits;
    uint32_t chunk;
    int stochastic;
  };
  const Case cases[] = {{BAGUA_COMPRESS_MINMAX, 8, 1024, 0}, {BAGUA_COMPRESS_MINMAX, 4, 512, 1},
                        {BAGUA_COMPRESS_MINMAX, 2, 4096, 0}, {BAGUA_COMPRESS_MINMAX, 1, 256, 1},
                        {BAGUA_COMPRESS_SIGN, 8, 1024, 0},   {BAGUA_COMPRESS_SIGN, 8, 384, 0},
                        {BAGUA_COMPRESS_FP16, 8, 1024, 0},   {BAGUA_COMPRESS_BF16, 8, 1024, 0}};
  for (const Case& c : cases) {
    for (size_t n : {size_t{700}, size_t{50001}}) {
      bagua_compression_t cfg = BAGUA_COMPRESSION_INITIALIZER;
      cfg.kind = c.kind;
      cfg.bits = c.bits;
      cfg.chunk = c.chunk;
      cfg.stochastic = c.stochastic;
      const Codec codec = Codec::from_config(&cfg);
      CAPTURE(codec.describe(), c.chunk, n);
      const RoundingKey key{c.stochastic == 1, 7, 3, 2, 12345};
      std::vector<float> own = random_vector(n, 1.0f, 90);
      std::vector<std::vector<uint8_t>> peers;
      for (int p = 0; p < 3; ++p) {
        std::vector<float> x = random_vector(n, 2.0f, 91 + p);
        peers.emplace_back(codec.compressed_bytes(n));
        codec.compress(x.data(), n, nullptr, RoundingKey{c.stochastic == 1, 7, 3, static_cast<uint32_t>(p), 0},
                       peers.back().data());
      }
      const uint8_t* inputs[3] = {peers[0].data(), peers[1].data(), peers[2].data()};
      for (bool feedback : {false, true}) {
        std::vector<float> acc = own, e_want = random_vector(n, 0.1f, 95), e_got = e_want;
        for (auto& q : peers) codec.decompress_accumulate(q.data(), n, acc.data());
        std::vector<uint8_t> want(codec.compressed_bytes(n)), got(want.size(), 0xAB);
        codec.compress(acc.data(), n, feedback ? e_want.data() : nullptr, key, want.data());
        codec.reduce_recompress(inputs, 3, own.data(), n, feedback ? e_got.data() : nullptr, key, got.data());
        CHECK(got == want);
        CHECK(std::memcmp(e_got.data(), e_want.data(), n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("BAGUA MinMaxUInt8 layout and its bound while max|x|*scale < 2^22", "[quantize]") {
  // Oracle: the same half-step bound as min-max, valid while rint(x * scale) is exact in fp32, i.e. while
  // max|x| * scale < 2^22 (beyond it the fp32 product has no fractional bits left and rounding error grows).
  std::vector<float> x = random_vector(3001, 1.0f, 41);
  std::vector<uint8_t> q(bagua_u8_compressed_bytes(x.size()));
  CHECK(q.size() == 32 + 3008);
  bagua_u8_compress(x.data(), x.size(), q.data());
  float lo, hi;
  std::memcpy(&lo, q.data(), 4);
  std::memcpy(&hi, q.data() + 4, 4);
  CHECK(lo == *std::min_element(x.begin(), x.end()));
  CHECK(hi == *std::max_element(x.begin(), x.end()));
  std::vector<float> y(x.size());
  bagua_u8_decompress(q.data(), x.size(), y.data());
  double step = (static_cast<double>(hi) - lo) / 255;
  float amax = std::max(std::fabs(lo), std::fabs(hi));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::fabs(x[i] - y[i]) <= step / 2 + 2 * ulp(amax) + 1e-6);
}

TEST_CASE("BAGUA MinMaxUInt8 edge inputs: constant, signed zeros, NaN", "[quantize]") {
  // Oracle: docs/formats.md. A constant tensor has scale = 255 / 1e-7, where fp32 spaces values 256 apart, so
  // upper - lower is 256: every code is clamped to 255 (not converted from 256.0f, which C++ leaves undefined and
  // x86 turned into 0), and decodes to the constant. The header holds +0 for a zero min or max, whichever zero the
  // search met first (CUDA's search order differs). A NaN element gets code 255, as in BAGUA.
  const size_t n = 1000;
  std::vector<uint8_t> q(bagua_u8_compressed_bytes(n));
  std::vector<float> y(n);
  std::vector<float> constant(n, 1.0f);
  bagua_u8_compress(constant.data(), n, q.data());
  for (size_t i = 0; i < n; ++i) REQUIRE(q[32 + i] == 255);
  bagua_u8_decompress(q.data(), n, y.data());
  for (size_t i = 0; i < n; ++i) REQUIRE(y[i] == 1.0f);

  std::vector<float> zeros(n);
  for (size_t i = 0; i < n; ++i) zeros[i] = 1.0f + static_cast<float>(i % 7);
  zeros[1] = -0.0f;
  zeros[256] = 0.0f;
  bagua_u8_compress(zeros.data(), n, q.data());
  uint32_t min_bits;
  std::memcpy(&min_bits, q.data(), 4);
  CHECK(min_bits == 0u);  // +0, not -0
  CHECK(q[32 + 1] == 0);
  CHECK(q[32 + 256] == 0);

  std::vector<float> with_nan = zeros;
  with_nan[77] = std::numeric_limits<float>::quiet_NaN();
  bagua_u8_compress(with_nan.data(), n, q.data());
  CHECK(q[32 + 77] == 255);
  CHECK(q[32 + 6] == 255);  // 7.0, the max

  std::vector<float> negative(n);  // a max of zero met as -0 first
  for (size_t i = 0; i < n; ++i) negative[i] = -1.0f - static_cast<float>(i % 7);
  negative[3] = -0.0f;
  negative[300] = 0.0f;
  bagua_u8_compress(negative.data(), n, q.data());
  uint32_t max_bits;
  std::memcpy(&max_bits, q.data() + 4, 4);
  CHECK(max_bits == 0u);
}

TEST_CASE("sign compression: scale is the chunk RMS, sign(0) = +1, error feedback telescopes", "[quantize]") {
  const size_t chunk = 256, n = 600;
  std::vector<float> x = random_vector(n, 1.0f, 51);
  x[5] = 0.0f;
  std::vector<uint8_t> q(sign_compressed_bytes(n, chunk));
  CHECK(q.size() == 2 * (4 + 32) + (4 + 12));
  sign_compress(x.data(), n, chunk, nullptr, q.data());
  float scale;
  std::memcpy(&scale, q.data(), 4);
  double lane[8] = {}, sum_sq = 0;  // the documented order: lane i mod 8 in fp64, then lanes 0..7
  for (size_t i = 0; i < chunk; ++i) lane[i % 8] += static_cast<double>(x[i]) * x[i];
  for (double l : lane) sum_sq += l;
  CHECK(scale == static_cast<float>(std::sqrt(sum_sq / chunk)));
  // a chunk length that is not a multiple of 8 or 16 takes the scalar tail for the last elements
  std::vector<uint8_t> q2(sign_compressed_bytes(37, 37));
  sign_compress(x.data(), 37, 37, nullptr, q2.data());
  std::vector<float> y2(37);
  sign_decompress(q2.data(), 37, 37, y2.data());
  for (size_t i = 0; i < 37; ++i) REQUIRE((y2[i] >= 0) == (x[i] >= 0));
  std::vector<float> y(n);
  sign_decompress(q.data(), n, chunk, y.data());
  CHECK(y[5] == scale);  // sign(0) = +1
  for (size_t i = 0; i < chunk; ++i) REQUIRE(std::fabs(y[i]) == scale);
  for (size_t i = 0; i < n; ++i) REQUIRE((y[i] >= 0) == (x[i] >= 0));
  std::vector<float> error(n, 0.0f);
  std::vector<double> sent(n, 0.0), inputs(n, 0.0);
  for (int t = 0; t < 40; ++t) {
    std::vector<float> g = random_vector(n, 1.0f, 60 + t);
    sign_compress(g.data(), n, chunk, error.data(), q.data());
    sign_decompress(q.data(), n, chunk, y.data());
    for (size_t i = 0; i < n; ++i) {
      sent[i] += y[i];
      inputs[i] += g[i];
    }
  }
  for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(sent[i] + error[i] - inputs[i]) < 1e-3);
  // decompress-accumulate adds exactly what decompress gives
  std::vector<float> acc = random_vector(n, 1.0f, 99), expect = acc;
  sign_decompress(q.data(), n, chunk, y.data());
  for (size_t i = 0; i < n; ++i) expect[i] += y[i];
  sign_decompress_accumulate(q.data(), n, chunk, acc.data());
  CHECK(acc == expect);
}

TEST_CASE("casts round to nearest even and come back exactly", "[quantize]") {
  std::vector<float> x = {1.0f, -2.5f, 65504.0f, 1.0f + std::ldexp(1.0f, -11), 3.0e-8f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  cast_from_float(x.data(), x.size(), h.data(), BAGUA_FLOAT16);
  cast_to_float(h.data(), BAGUA_FLOAT16, x.size(), back.data());
  CHECK(back[0] == 1.0f);
  CHECK(back[2] == 65504.0f);
  CHECK(back[3] == 1.0f);  // a tie goes to the even neighbour
  cast_from_float(x.data(), x.size(), h.data(), BAGUA_BFLOAT16);
  cast_to_float(h.data(), BAGUA_BFLOAT16, x.size(), back.data());
  CHECK(back[1] == -2.5f);
  CHECK_THROWS_AS(cast_from_float(x.data(), 1, h.data(), BAGUA_INT32), Error);
}

TEST_CASE("the memory-type dispatcher runs the CPU kernels on host memory", "[quantize]") {
  MinMaxFormat f{8, 256};
  std::vector<float> x = random_vector(1000, 1.0f, 77), acc(1000, 0.0f), y(1000);
  std::vector<uint8_t> a(minmax_compressed_bytes(x.size(), f)), b(a.size());
  kernels::minmax_compress(x.data(), x.size(), f, RoundingKey{}, a.data(), nullptr);
  minmax_compress(x.data(), BAGUA_FLOAT32, x.size(), f, RoundingKey{}, b.data());
  CHECK(a == b);
  kernels::minmax_decompress_accumulate(a.data(), x.size(), f, acc.data(), nullptr);
  minmax_decompress(a.data(), x.size(), f, y.data(), BAGUA_FLOAT32);
  CHECK(acc == y);
  std::vector<float> s1 = x, s2 = x;
  kernels::reduce_from(s1.data(), s1.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM, nullptr);
  reduce_from(s2.data(), s2.data(), x.data(), x.size(), BAGUA_FLOAT32, BAGUA_SUM);
  CHECK(s1 == s2);
}

// Oracle: docs/formats.md, error feedback. A residual that would be Inf or NaN is stored as 0, so after one step
// with non-finite input (an fp16 overflow under a loss scaler) the next steps are finite again. Runs on each CPU
// variant through ctest's canonical_nan_<level> (BAGUA_CPU_KERNELS).
TEST_CASE("error feedback forgets a non-finite residual and recovers", "[quantize][canonical_nan]") {
  const size_t n = 4096;  // 16 chunks of 256: the vector loops and the scalar tail both run
  for (int which = 0; which < 3; ++which) {
    std::vector<float> x = random_vector(n, 1.0f, 77), error(n, 0.0f), y(n);
    x[3] = std::numeric_limits<float>::infinity();     // poisons chunk 0
    x[300] = std::numeric_limits<float>::quiet_NaN();  // poisons chunk 1
    x[600] = 3e38f, x[601] = -3e38f;                   // chunk 2: x - min overflows
    if (which == 0) {
      MinMaxFormat f{8, 256};
      std::vector<uint8_t> q(minmax_compressed_bytes(n, f));
      minmax_compress_ef(x.data(), BAGUA_FLOAT32, n, error.data(), f, RoundingKey{}, q.data());
      for (float e : error) REQUIRE(std::isfinite(e));
      for (size_t i = 0; i < 512; ++i) REQUIRE(error[i] == 0.0f);  // the poisoned chunks owe nothing
      std::vector<float> next = random_vector(n, 1.0f, 78);
      minmax_compress_ef(next.data(), BAGUA_FLOAT32, n, error.data(), f, RoundingKey{}, q.data());
      minmax_decompress(q.data(), n, f, y.data(), BAGUA_FLOAT32);
    } else if (which == 1) {
      std::vector<uint8_t> q(sign_compressed_bytes(n, 256));
      sign_compress(x.data(), n, 256, error.data(), q.data());
      for (float e : error) REQUIRE(std::isfinite(e));
      std::vector<float> next = random_vector(n, 1.0f, 78);
      sign_compress(next.data(), n, 256, error.data(), q.data());
      sign_decompress(q.data(), n, 256, y.data());
    } else {
      // The fp16 wire: 80000 is finite in fp32 and Inf in fp16.
      std::fill(x.begin(), x.end(), 80000.0f);
      bagua_compression_t cfg{};
      cfg.size = sizeof(cfg);
      cfg.magic = BAGUA_COMPRESSION_MAGIC;
      cfg.version = BAGUA_VERSION_CODE;
      cfg.kind = BAGUA_COMPRESS_FP16;
      cfg.bits = 8;
      cfg.chunk = 256;
      cfg.error_feedback = 1;
      Codec codec = Codec::from_config(&cfg);
      std::vector<uint8_t> q(codec.compressed_bytes(n));
      codec.compress(x.data(), n, error.data(), RoundingKey{}, q.data());
      for (float e : error) REQUIRE(e == 0.0f);
      std::vector<float> next = random_vector(n, 1.0f, 78);
      codec.compress(next.data(), n, error.data(), RoundingKey{}, q.data());
      codec.decompress(q.data(), n, y.data());
    }
    for (size_t i = 0; i < n; ++i) REQUIRE(std::isfinite(y[i]));
  }
}
