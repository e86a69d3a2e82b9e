// CPU reductions and fp16/bf16 conversions: the arithmetic rules of docs/architecture.md, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/half.h"

using namespace bagua;

TEST_CASE("fp16 -> fp32 -> fp16 is the identity for every non-NaN fp16", "[reduce]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_float(float_to_fp16(f))));
      continue;
    }
    REQUIRE(float_to_fp16(f) == h);
  }
}

TEST_CASE("fp32 -> fp16 rounds to nearest even, overflows to Inf", "[reduce]") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // halfway to the next step rounds to Inf
  CHECK(float_to_fp16(-1e9f) == 0xfc00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  CHECK(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // Subnormals: 2^-24 is the smallest; half of it rounds to zero (even), 1.5x to 2^-23.
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(float_to_fp16(1.5f * std::ldexp(1.0f, -24)) == 0x0002);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN quiet", "[reduce]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(float_to_bf16(bits_float(0x3f808000)) == 0x3f80);  // tie, even stays
  CHECK(float_to_bf16(bits_float(0x3f818000)) == 0x3f82);  // tie, odd rounds up
  CHECK(float_to_bf16(bits_float(0x3f808001)) == 0x3f81);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(bits_float(0x7f800001)))));  // signalling NaN stays NaN
}

TEST_CASE("integer sums and products wrap", "[reduce]") {
  int8_t a[2] = {127, -128}, b[2] = {1, -1};
  reduce_into(a, b, 2, BAGUA_INT8, BAGUA_SUM);
  CHECK(a[0] == -128);
  CHECK(a[1] == 127);
  int32_t c = 65536, d = 65536;
  reduce_into(&c, &d, 1, BAGUA_INT32, BAGUA_PROD);
  CHECK(c == 0);
  uint64_t e = ~uint64_t(0), f = 2;
  reduce_into(&e, &f, 1, BAGUA_UINT64, BAGUA_SUM);
  CHECK(e == 1);
}

TEST_CASE("min and max per type, signed and unsigned", "[reduce]") {
  int32_t s[2] = {-5, 5}, t[2] = {3, -3};
  std::vector<int32_t> mins(s, s + 2), maxs(s, s + 2);
  reduce_into(mins.data(), t, 2, BAGUA_INT32, BAGUA_MIN);
  reduce_into(maxs.data(), t, 2, BAGUA_INT32, BAGUA_MAX);
  CHECK(mins == std::vector<int32_t>{-5, -3});
  CHECK(maxs == std::vector<int32_t>{3, 5});
  uint8_t u = 200, v = 100;
  reduce_into(&u, &v, 1, BAGUA_UINT8, BAGUA_MIN);
  CHECK(u == 100);
}

TEST_CASE("average divides once, truncating integers toward zero", "[reduce]") {
  int32_t x[3] = {-7, 7, -1};
  divide_by(x, 3, BAGUA_INT32, 2);
  CHECK(x[0] == -3);
  CHECK(x[1] == 3);
  CHECK(x[2] == 0);
  uint16_t h = float_to_fp16(3.0f);
  divide_by(&h, 1, BAGUA_FLOAT16, 3);
  CHECK(h == float_to_fp16(1.0f));
  double d = 1.0;
  divide_by(&d, 1, BAGUA_FLOAT64, 3);
  CHECK(d == 1.0 / 3.0);
}

TEST_CASE("average by a rank count that a narrow integer type cannot hold", "[reduce]") {
  // Oracle: truncating division in 64 bits. The divisor (the communicator's size) is not cast to the element type:
  // int8(200) would be -56 and uint8(256) zero (a division fault).
  for (int divisor : {128, 200, 256}) {
    std::vector<int8_t> s8 = {-128, -100, 127, 5, -1};
    std::vector<uint8_t> u8 = {255, 200, 128, 1, 0};
    std::vector<int8_t> want8;
    std::vector<uint8_t> wantu8;
    for (int8_t v : s8) want8.push_back(static_cast<int8_t>(int64_t{v} / divisor));
    for (uint8_t v : u8) wantu8.push_back(static_cast<uint8_t>(int64_t{v} / divisor));
    for (CpuKernels k : {CpuKernels::kScalar, CpuKernels::kAvx2, CpuKernels::kAvx512}) {
      if (!cpu_kernels_available(k)) continue;
      INFO(cpu_kernels_name(k) << " divisor " << divisor);
      std::vector<int8_t> a = s8;
      std::vector<uint8_t> b = u8;
      divide_by_with(k, a.data(), a.size(), BAGUA_INT8, divisor);
      divide_by_with(k, b.data(), b.size(), BAGUA_UINT8, divisor);
      CHECK(a == want8);
      CHECK(b == wantu8);
    }
  }
}

TEST_CASE("fp16 and bf16 add in fp32 and round once", "[reduce]") {
  // 2048 + 1 is not representable in fp16: the fp32 sum 2049 rounds (ties to even) to 2048.
  uint16_t a = float_to_fp16(2048.0f), b = float_to_fp16(1.0f);
  reduce_into(&a, &b, 1, BAGUA_FLOAT16, BAGUA_SUM);
  CHECK(fp16_to_float(a) == 2048.0f);
  uint16_t c = float_to_bf16(1.5f), d = float_to_bf16(2.25f);
  reduce_into(&c, &d, 1, BAGUA_BFLOAT16, BAGUA_SUM);
  CHECK(bf16_to_float(c) == 3.75f);
  uint16_t e = float_to_fp16(3.0f), f = float_to_fp16(-4.0f);
  reduce_into(&e, &f, 1, BAGUA_FLOAT16, BAGUA_PROD);
  CHECK(fp16_to_float(e) == -12.0f);
}

TEST_CASE("reduce_from writes a third buffer and leaves inputs alone", "[reduce]") {
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3] = {0, 0, 0};
  reduce_from(out, a, b, 3, BAGUA_FLOAT32, BAGUA_SUM);
  CHECK(out[2] == 33.0f);
  CHECK(a[2] == 3.0f);
}

TEST_CASE("every CPU variant gives the scalar reference's bits", "[reduce]") {
  // Random bit patterns cover NaN (with payloads), Inf, subnormals and signed zeros in every type.
  std::mt19937_64 rng(2024);
  const size_t count = 1000 + 37;  // not a multiple of any vector width
  for (int t = 0; t < 10; ++t) {
    auto dtype = static_cast<bagua_datatype_t>(t);
    size_t bytes = count * (t <= 1 ? 1 : t == 6 || t == 7 ? 2 : (t == 2 || t == 3 || t == 8) ? 4 : 8);
    std::vector<uint8_t> a(bytes), b(bytes);
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    for (int o = 0; o < 5; ++o) {
      auto op = static_cast<bagua_redop_t>(o);
      std::vector<uint8_t> want(bytes);
      reduce_from_with(CpuKernels::kScalar, want.data(), a.data(), b.data(), count, dtype, op);
      for (CpuKernels k : {CpuKernels::kAvx2, CpuKernels::kAvx512}) {
        if (!cpu_kernels_available(k)) continue;
        std::vector<uint8_t> got(bytes), in_place = a;
        reduce_from_with(k, got.data(), a.data(), b.data(), count, dtype, op);
        reduce_from_with(k, in_place.data(), in_place.data(), b.data(), count, dtype, op);
        INFO(cpu_kernels_name(k) << " dtype " << t << " op " << o);
        REQUIRE(got == want);
        REQUIRE(in_place == want);
      }
      if (op == BAGUA_AVG) {
        std::vector<uint8_t> div_want = a;
        divide_by_with(CpuKernels::kScalar, div_want.data(), count, dtype, 3);
        for (CpuKernels k : {CpuKernels::kAvx2, CpuKernels::kAvx512}) {
          if (!cpu_kernels_available(k)) continue;
          std::vector<uint8_t> div_got = a;
          divide_by_with(k, div_got.data(), count, dtype, 3);
          INFO(cpu_kernels_name(k) << " divide dtype " << t);
          REQUIRE(div_got == div_want);
        }
      }
    }
  }
}

TEST_CASE("NaN results are the canonical quiet NaN, and min and max propagate NaN from either side", "[reduce]") {
  float nan_a = bits_float(0x7fc00123), nan_b = bits_float(0xffc00456), one = 1.0f;
  float out;
  reduce_from(&out, &nan_a, &nan_b, 1, BAGUA_FLOAT32, BAGUA_SUM);
  CHECK(float_bits(out) == 0x7fc00000u);
  reduce_from(&out, &one, &nan_b, 1, BAGUA_FLOAT32, BAGUA_MIN);
  CHECK(float_bits(out) == 0x7fc00000u);
  reduce_from(&out, &nan_a, &one, 1, BAGUA_FLOAT32, BAGUA_MAX);
  CHECK(float_bits(out) == 0x7fc00000u);
  float inf = std::numeric_limits<float>::infinity(), minus_inf = -inf;
  reduce_from(&out, &inf, &minus_inf, 1, BAGUA_FLOAT32, BAGUA_SUM);  // Inf - Inf
  CHECK(float_bits(out) == 0x7fc00000u);
  reduce_from(&out, &inf, &one, 1, BAGUA_FLOAT32, BAGUA_SUM);
  CHECK(out == inf);
  uint16_t h_nan = 0xfd01, h_one = float_to_fp16(1.0f), h_out;
  reduce_from(&h_out, &h_one, &h_nan, 1, BAGUA_FLOAT16, BAGUA_SUM);
  CHECK(h_out == 0x7e00);
  uint16_t b_nan = 0xff81, b_one = float_to_bf16(1.0f), b_out;
  reduce_from(&b_out, &b_nan, &b_one, 1, BAGUA_BFLOAT16, BAGUA_PROD);
  CHECK(b_out == 0x7fc0);
  double d_nan = std::numeric_limits<double>::signaling_NaN(), d_one = 1.0, d_out;
  reduce_from(&d_out, &d_one, &d_nan, 1, BAGUA_FLOAT64, BAGUA_SUM);
  uint64_t d_bits;
  std::memcpy(&d_bits, &d_out, 8);
  CHECK(d_bits == 0x7ff8000000000000ull);
}
