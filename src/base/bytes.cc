#include "base/bytes.h"

#include <cstring>

#include "base/error.h"

namespace bagua {

void Writer::put(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void Writer::raw(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  out_.insert(out_.end(), p, p + size);
}

void Writer::bytes(const Bytes& b) {
  u32(static_cast<uint32_t>(b.size()));
  raw(b.data(), b.size());
}

void Writer::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  raw(s.data(), s.size());
}

void Reader::malformed(const char* why) { fail(BAGUA_ERR_REMOTE, "malformed {}: {}", what_, why); }

uint64_t Reader::get(int n) {
  if (remaining() < static_cast<size_t>(n)) malformed("truncated");
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
  p_ += n;
  return v;
}

void Reader::raw(void* out, size_t size) {
  if (remaining() < size) malformed("truncated");
  std::memcpy(out, p_, size);
  p_ += size;
}

Bytes Reader::bytes(size_t cap) {
  uint32_t n = u32();
  if (n > cap) malformed("field longer than its cap");
  if (n > remaining()) malformed("field longer than the message");
  Bytes out(p_, p_ + n);
  p_ += n;
  return out;
}

std::string Reader::str(size_t cap) {
  uint32_t n = u32();
  if (n > cap) malformed("string longer than its cap");
  if (n > remaining()) malformed("string longer than the message");
  std::string out(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return out;
}

void Reader::expect_end() {
  if (remaining() != 0) malformed("trailing bytes");
}

}  // namespace bagua
