// CPU reductions and fp16/bf16 conversions: the arithmetic rules of DESIGN.md, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
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
