// HMAC-SHA256 (OpenSSL libcrypto) and random bytes for the bootstrap's challenge-response.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "bootstrap/wire.h"

namespace bagua {

using Digest = std::array<uint8_t, 32>;
constexpr size_t kNonceSize = 32;

// HMAC-SHA256 over the concatenation of `parts`.
Digest hmac_sha256(const Bytes& key, std::initializer_list<std::basic_string_view<uint8_t>> parts);
bool digest_equal(const uint8_t* a, const uint8_t* b);  // constant time
Bytes random_bytes(size_t n);

inline std::basic_string_view<uint8_t> view(const Bytes& b) { return {b.data(), b.size()}; }
inline std::basic_string_view<uint8_t> view(const char* label) {
  return {reinterpret_cast<const uint8_t*>(label), std::char_traits<char>::length(label)};
}

// Hex text <-> bytes (BAGUA_SECRET). parse_hex returns false on odd length or a non-hex character.
bool parse_hex(const std::string& text, Bytes* out);
std::string to_hex(const Bytes& bytes);

}  // namespace bagua
