// Bootstrap wire format (docs/bootstrap.md): little-endian, length-prefixed frames.
//   header: magic u32 "BGUA" | protocol version u16 | frame type u16 | payload length u32
// Each frame type has a payload cap, checked before any buffer is allocated.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/deadline.h"
#include "bootstrap/socket.h"

namespace bagua {

constexpr uint32_t kWireMagic = 0x41554742;  // "BGUA" in little-endian byte order
constexpr uint16_t kWireVersion = 2;         // 2: RankInfo carries the PID namespace
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
  kAgree = 9,      // shrink: a message of the survivors' agreement (bootstrap/agreement.h)
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

}  // namespace bagua
