#include "bootstrap/hmac.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/error.h"

namespace bagua {

Digest hmac_sha256(const Bytes& key, std::initializer_list<std::basic_string_view<uint8_t>> parts) {
  Digest out{};
  HMAC_CTX* ctx = nullptr;
  // The one-shot HMAC() needs one buffer; EVP_MAC would do, HMAC_CTX is simpler and still in OpenSSL 3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ctx = HMAC_CTX_new();
  if (!ctx) fail(BAGUA_ERR_SYSTEM, "HMAC_CTX_new failed");
  static const uint8_t kEmpty = 0;
  bool ok = HMAC_Init_ex(ctx, key.empty() ? &kEmpty : key.data(), static_cast<int>(key.size()), EVP_sha256(), nullptr);
  for (const auto& part : parts) ok = ok && HMAC_Update(ctx, part.data(), part.size());
  unsigned int len = 0;
  ok = ok && HMAC_Final(ctx, out.data(), &len);
  HMAC_CTX_free(ctx);
#pragma GCC diagnostic pop
  if (!ok || len != out.size()) fail(BAGUA_ERR_SYSTEM, "HMAC-SHA256 failed");
  return out;
}

bool digest_equal(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, 32) == 0; }

Bytes random_bytes(size_t n) {
  Bytes out(n);
  if (RAND_bytes(out.data(), static_cast<int>(n)) != 1) fail(BAGUA_ERR_SYSTEM, "RAND_bytes failed");
  return out;
}

bool parse_hex(const std::string& text, Bytes* out) {
  if (text.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Bytes bytes;
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = nibble(text[i]);
    int lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes.push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  *out = std::move(bytes);
  return true;
}

std::string to_hex(const Bytes& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace bagua
