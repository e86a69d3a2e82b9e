// Bootstrap wire format (docs/bootstrap.md): little-endian, length-prefixed frames.
//   header: magic u32 "BGUA" | protocol version u16 | frame type u16 | payload length u32
// Each frame type has a payload cap, checked before any buffer is allocated.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "core/deadline.h"

namespace bagua {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t kWireMagic = 0x41554742;  // "BGUA" in little-endian byte order
constexpr uint16_t kWireVersion = 1;
constexpr size_t kFrameHeaderSize = 12;

enum class FrameType : uint16_t {
  kChallenge = 1,  // server -> client: server nonce
  kHello = 2,      // client -> server: client nonce, HMAC, hello body
  kWelcome = 3,    // server -> client: HMAC proving the server knows the secret
  kTable = 4,      // root -> ranks: the job's rank table
  kError = 5,      // root -> rank: why the job could not form
  kData = 6,       // ring: bootstrap allgather block
  kAbort = 7,      // ring: a rank failed; passed on around the ring
  kBye = 8,        // ring: clean shutdown, a following EOF is no failure
};

// Largest payload accepted for each type; 0 for an unknown type.
size_t frame_payload_cap(FrameType type);
const char* frame_type_name(FrameType type);

struct Frame {
  FrameType type{};
  Bytes payload;
};

Bytes encode_frame(FrameType type, const Bytes& payload);

// Incremental decoder for non-blocking sockets. Validates the header (magic, version, type, cap) as soon as
// its 12 bytes are in, before reserving room for the payload.
class FrameParser {
 public:
  enum class State { kNeedMore, kFrame, kBad };
  // Consumes up to `size` bytes; returns how many it took. Stops after a complete frame or an error.
  size_t feed(const uint8_t* data, size_t size);
  State state() const { return state_; }
  const std::string& error() const { return error_; }
  Frame take();  // only when state() == kFrame; resets for the next frame
  // Bytes the parser wants next (header or payload remainder); lets callers read no further than one frame.
  size_t wanted() const;

 private:
  State state_ = State::kNeedMore;
  uint8_t header_[kFrameHeaderSize] = {};
  size_t header_have_ = 0;
  Frame frame_;
  size_t payload_size_ = 0;
  std::string error_;
};

// Blocking helpers over a socket; a frame that breaks the format throws BAGUA_ERR_REMOTE.
void send_frame(Socket& sock, FrameType type, const Bytes& payload, Deadline deadline,
                const std::atomic<bool>* stop = nullptr);
Frame recv_frame(Socket& sock, Deadline deadline, const std::atomic<bool>* stop = nullptr);

// ERROR frame payload: status i32 | message (u32 length + text). raise_error_frame throws it as an Error.
Bytes encode_error(int32_t status, const std::string& message);
[[noreturn]] void raise_error_frame(const Bytes& payload);

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
