// Byte buffers and little-endian field writer/reader, shared by the bootstrap wire format and the transports'
// address blobs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bagua {

using Bytes = std::vector<uint8_t>;

// Little-endian field writer/reader. Reader throws BAGUA_ERR_REMOTE ("malformed ...") on truncation
// or when a length field exceeds what remains.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void raw(const void* data, size_t size);
  void bytes(const Bytes& b);      // u32 length + data
  void str(const std::string& s);  // u32 length + data
  Bytes& out() { return out_; }

 private:
  void put(uint64_t v, int n);
  Bytes out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* what) : p_(data), end_(data + size), what_(what) {}
  explicit Reader(const Bytes& b, const char* what = "message") : Reader(b.data(), b.size(), what) {}
  Reader(Bytes&&, const char* = "message") = delete;  // it would read a temporary that is gone (found by ASan)
  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  void raw(void* out, size_t size);
  Bytes bytes(size_t cap);
  std::string str(size_t cap);
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  void expect_end();

 private:
  uint64_t get(int n);
  [[noreturn]] void malformed(const char* why);
  const uint8_t* p_;
  const uint8_t* end_;
  const char* what_;
};

}  // namespace bagua
