// The min-max and sign kernels against a plain re-implementation of docs/formats.md, byte for byte and bit for bit.
// Oracle: the reference functions below, written from the format text one element at a time (no SIMD, no chunk
// tricks), sharing with the library only the documented draw (stochastic_draw). Inputs cover every bits value, chunk
// sizes that are and are not multiples of the vector width, lengths with every tail, constant chunks, signed
// zeros, NaN and Inf, ranges that overflow fp32, and a stochastic key whose indices cross 2^32. ctest runs these cases
// once per CPU path (BAGUA_CPU_KERNELS=scalar, avx2, and the best this CPU has), so each hand-written loop is checked.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/half.h"
#include "kernels/quantize.h"
#include "kernels/quantize_math.h"

using namespace bagua;

namespace {

float canonical(float x) { return x != x ? bits_float(0x7fc00000u) : x; }
// An error-feedback residual as kept: Inf or NaN becomes 0 (docs/formats.md).
float kept_residual(float x) { return std::isfinite(x) ? x : 0.0f; }

void put_f32(std::vector<uint8_t>& out, float f) {
  uint32_t u = float_bits(f);
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(u >> (8 * k)));
}

// minmax v1: per chunk f32 min, f32 max, then codes LSB-first padded to 4 bytes. A chunk with a NaN or Inf has
// min = max = NaN and zero codes. With error: t = x + e, e = kept_residual(t - (min + code * step)).
std::vector<uint8_t> ref_minmax(const std::vector<float>& x, std::vector<float>* error, int bits, size_t chunk,
                                const RoundingKey& key) {
  std::vector<uint8_t> out;
  const float levels = static_cast<float>((1u << bits) - 1);
  for (size_t begin = 0; begin < x.size(); begin += chunk) {
    const size_t len = std::min(chunk, x.size() - begin);
    std::vector<float> t(len);
    for (size_t i = 0; i < len; ++i) t[i] = error ? x[begin + i] + (*error)[begin + i] : x[begin + i];
    bool finite = true;
    float lo = t[0], hi = t[0];
    for (float v : t) {
      finite = finite && std::isfinite(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    float step = 0, inv = 0;
    if (finite) {
      step = (hi - lo) / levels;
      inv = step > 0 ? levels / (hi - lo) : 0.0f;
      if (!std::isfinite(step) || !std::isfinite(inv)) step = inv = 0;
    } else {
      lo = hi = std::numeric_limits<float>::quiet_NaN();
    }
    if (lo == 0.0f) lo = 0.0f;  // either zero is written as +0
    if (hi == 0.0f) hi = 0.0f;
    put_f32(out, lo);
    put_f32(out, hi);
    std::vector<uint32_t> codes(len, 0);
    for (size_t i = 0; i < len && finite; ++i) {
      float s = (t[i] - lo) * inv;
      if (s != s) continue;  // a range that overflows has step 0, and x - min = Inf gives NaN: code 0
      if (key.stochastic) {
        // (rint(s * 2^16) + r) / 2^16 rounded down, at most the top code.
        const double fixed =
            std::rint(static_cast<double>(s) * 65536.0) + stochastic_draw(key, key.index_base + begin + i);
        codes[i] = static_cast<uint32_t>(std::min(std::floor(fixed / 65536.0), static_cast<double>(levels)));
        continue;
      }
      float r = std::rint(s);
      r = r < 0.0f ? 0.0f : (r > levels ? levels : r);
      codes[i] = static_cast<uint32_t>(r);
    }
    const size_t per_byte = 8 / static_cast<size_t>(bits), bytes = ((len + per_byte - 1) / per_byte + 3) / 4 * 4;
    std::vector<uint8_t> block(bytes, 0);
    for (size_t i = 0; i < len; ++i) block[i / per_byte] |= static_cast<uint8_t>(codes[i] << ((i % per_byte) * bits));
    out.insert(out.end(), block.begin(), block.end());
    if (error)
      for (size_t i = 0; i < len; ++i)
        (*error)[begin + i] = kept_residual(t[i] - (finite ? lo + static_cast<float>(codes[i]) * step : lo));
  }
  return out;
}

// Decompression of ref_minmax's layout: min + code * step, NaN for a poisoned chunk; accumulating adds and
// canonicalises.
void ref_minmax_decode(const std::vector<uint8_t>& in, size_t count, int bits, size_t chunk, std::vector<float>& out,
                       bool accumulate) {
  const float levels = static_cast<float>((1u << bits) - 1);
  size_t at = 0;
  for (size_t begin = 0; begin < count; begin += chunk) {
    const size_t len = std::min(chunk, count - begin);
    float lo, hi;
    std::memcpy(&lo, &in[at], 4);
    std::memcpy(&hi, &in[at + 4], 4);
    const bool poisoned = std::isnan(lo) || std::isnan(hi);
    float step = poisoned ? 0.0f : (hi - lo) / levels;
    float inv = step > 0 ? levels / (hi - lo) : 0.0f;
    if (!std::isfinite(step) || !std::isfinite(inv)) step = 0;
    const size_t per_byte = 8 / static_cast<size_t>(bits);
    for (size_t i = 0; i < len; ++i) {
      uint32_t code = (in[at + 8 + i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);
      float v = poisoned ? std::numeric_limits<float>::quiet_NaN() : lo + static_cast<float>(code) * step;
      out[begin + i] = accumulate ? canonical(out[begin + i] + v) : v;
    }
    at += 8 + ((len + per_byte - 1) / per_byte + 3) / 4 * 4;
  }
}

// sign v1: per chunk f32 scale = sqrt(sum (x+e)^2 / d), the sum in fp64 with element i in lane i mod 8, then
// bits LSB-first (1 for !(t < 0)) padded to 4 bytes. e = kept_residual(t - (+-scale)).
std::vector<uint8_t> ref_sign(const std::vector<float>& x, std::vector<float>* error, size_t chunk) {
  std::vector<uint8_t> out;
  for (size_t begin = 0; begin < x.size(); begin += chunk) {
    const size_t len = std::min(chunk, x.size() - begin);
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < len; ++i) {
      double t = static_cast<double>(x[begin + i] + (error ? (*error)[begin + i] : 0.0f));
      lane[i % 8] += t * t;
    }
    double sum = 0;
    for (double l : lane) sum += l;
    float scale = canonical(static_cast<float>(std::sqrt(sum / static_cast<double>(len))));
    put_f32(out, scale);
    std::vector<uint8_t> block(((len + 7) / 8 + 3) / 4 * 4, 0);
    for (size_t i = 0; i < len; ++i) {
      float t = x[begin + i] + (error ? (*error)[begin + i] : 0.0f);
      bool positive = !(t < 0.0f);
      block[i / 8] |= static_cast<uint8_t>(static_cast<unsigned>(positive) << (i % 8));
      if (error) (*error)[begin + i] = kept_residual(t - (positive ? scale : -scale));
    }
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

std::vector<float> test_input(size_t n, uint32_t seed, int pattern) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  if (pattern == 1) {  // constant runs, and zeros of both signs in one chunk
    const float runs[] = {0.75f, -0.0f, 0.0f, -0.0f, -1.5f, 0.0f};
    for (size_t i = 0; i < n; ++i) x[i] = runs[(i / 150) % 6];
  }
  if (pattern == 3)  // ranges that overflow fp32 (step 0): some x - min are Inf
    for (size_t i = 0; i < n; i += 97) x[i] = (i / 97) % 2 ? 3e38f : -3e38f;
  if (pattern == 2 && n > 700) {  // non-finite values in a few places
    x[3] = std::numeric_limits<float>::infinity();
    x[n / 2] = bits_float(0x7fa00001u);
    x[n - 1] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const size_t kLengths[] = {1, 15, 16, 17, 63, 64, 65, 200, 1000, 1024, 1040, 4097, 10007};

}  // namespace

TEST_CASE("min-max compress, error feedback and decompress match the format text bit for bit", "[kernel_reference]") {
  INFO("CPU kernels: " << cpu_kernels_name(cpu_kernels()));
  for (int bits : {1, 2, 4, 8})
    for (size_t chunk : {size_t(256), size_t(1000), size_t(1024), size_t(4096)})
      for (size_t n : kLengths)
        for (int pattern : {0, 1, 2, 3})
          for (int rounding = 0; rounding < 3; ++rounding) {
            // Nearest; stochastic; stochastic with an odd index base whose chunks cross 2^32.
            RoundingKey key{rounding > 0, 0xfeed, 9, 3, rounding == 2 ? (uint64_t{1} << 32) - 1001 : 64};
            INFO("bits " << bits << " chunk " << chunk << " n " << n << " pattern " << pattern << " rounding "
                         << rounding);
            MinMaxFormat f{bits, chunk};
            std::vector<float> x = test_input(n, static_cast<uint32_t>(n * 31 + bits), pattern);
            std::vector<uint8_t> q(minmax_compressed_bytes(n, f));
            minmax_compress(x.data(), BAGUA_FLOAT32, n, f, key, q.data());
            REQUIRE(q == ref_minmax(x, nullptr, bits, chunk, key));

            std::vector<float> error = test_input(n, 77, 0), ref_error = error;
            for (auto& e : error) e *= 0.01f;
            ref_error = error;
            minmax_compress_ef(x.data(), BAGUA_FLOAT32, n, error.data(), f, key, q.data());
            REQUIRE(q == ref_minmax(x, &ref_error, bits, chunk, key));
            REQUIRE(same_bits(error, ref_error));

            std::vector<float> y(n), ref_y(n), acc = test_input(n, 5, 0), ref_acc = acc;
            minmax_decompress(q.data(), n, f, y.data(), BAGUA_FLOAT32);
            ref_minmax_decode(q, n, bits, chunk, ref_y, false);
            REQUIRE(same_bits(y, ref_y));
            minmax_decompress_accumulate(q.data(), n, f, acc.data());
            ref_minmax_decode(q, n, bits, chunk, ref_acc, true);
            REQUIRE(same_bits(acc, ref_acc));
          }
}

TEST_CASE("sign compress with and without error feedback and sign decompress-accumulate match the format text",
          "[kernel_reference]") {
  INFO("CPU kernels: " << cpu_kernels_name(cpu_kernels()));
  for (size_t chunk : {size_t(8), size_t(100), size_t(1024)})
    for (size_t n : kLengths)
      for (int pattern : {0, 1, 2}) {
        INFO("chunk " << chunk << " n " << n << " pattern " << pattern);
        std::vector<float> x = test_input(n, static_cast<uint32_t>(n + chunk), pattern);
        std::vector<uint8_t> q(sign_compressed_bytes(n, chunk));
        sign_compress(x.data(), n, chunk, nullptr, q.data());
        REQUIRE(q == ref_sign(x, nullptr, chunk));

        std::vector<float> error = test_input(n, 11, 0);
        for (auto& e : error) e *= 0.1f;
        std::vector<float> ref_error = error;
        sign_compress(x.data(), n, chunk, error.data(), q.data());
        REQUIRE(q == ref_sign(x, &ref_error, chunk));
        REQUIRE(same_bits(error, ref_error));

        std::vector<float> acc = test_input(n, 13, 0), ref_acc = acc;
        sign_decompress_accumulate(q.data(), n, chunk, acc.data());
        size_t at = 0;
        for (size_t begin = 0; begin < n; begin += chunk) {
          const size_t len = std::min(chunk, n - begin);
          float scale;
          std::memcpy(&scale, &q[at], 4);
          for (size_t i = 0; i < len; ++i) {
            bool positive = (q[at + 4 + i / 8] >> (i % 8)) & 1u;
            ref_acc[begin + i] = canonical(ref_acc[begin + i] + (positive ? scale : -scale));
          }
          at += 4 + ((len + 7) / 8 + 3) / 4 * 4;
        }
        REQUIRE(same_bits(acc, ref_acc));
      }
}
