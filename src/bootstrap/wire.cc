#include "bootstrap/wire.h"

#include <cstring>

#include "base/error.h"

namespace bagua {

size_t frame_payload_cap(FrameType type) {
  switch (type) {
    case FrameType::kChallenge: return 64;
    case FrameType::kHello: return 4096;
    case FrameType::kWelcome: return 64;
    case FrameType::kTable: return 64u << 20;
    case FrameType::kError: return 4096;
    case FrameType::kData: return 64u << 20;
    case FrameType::kAbort: return 4096;
    case FrameType::kBye: return 0;
    case FrameType::kAgree: return 64u << 20;
  }
  return 0;
}

const char* frame_type_name(FrameType type) {
  switch (type) {
    case FrameType::kChallenge: return "CHALLENGE";
    case FrameType::kHello: return "HELLO";
    case FrameType::kWelcome: return "WELCOME";
    case FrameType::kTable: return "TABLE";
    case FrameType::kError: return "ERROR";
    case FrameType::kData: return "DATA";
    case FrameType::kAbort: return "ABORT";
    case FrameType::kBye: return "BYE";
    case FrameType::kAgree: return "AGREE";
  }
  return "UNKNOWN";
}

static bool known_type(uint16_t type) { return type >= 1 && type <= 9; }

Bytes encode_frame(FrameType type, const Bytes& payload) {
  Writer w;
  w.u32(kWireMagic);
  w.u16(kWireVersion);
  w.u16(static_cast<uint16_t>(type));
  w.u32(static_cast<uint32_t>(payload.size()));
  w.raw(payload.data(), payload.size());
  return std::move(w.out());
}

size_t FrameParser::wanted() const {
  if (state_ != State::kNeedMore) return 0;
  if (header_have_ < kFrameHeaderSize) return kFrameHeaderSize - header_have_;
  return payload_size_ - frame_.payload.size();
}

size_t FrameParser::feed(const uint8_t* data, size_t size) {
  size_t used = 0;
  while (state_ == State::kNeedMore && used < size) {
    if (header_have_ < kFrameHeaderSize) {
      size_t n = std::min(size - used, kFrameHeaderSize - header_have_);
      std::memcpy(header_ + header_have_, data + used, n);
      header_have_ += n;
      used += n;
      if (header_have_ < kFrameHeaderSize) break;
      Reader r(header_, kFrameHeaderSize, "frame header");
      uint32_t magic = r.u32();
      uint16_t version = r.u16();
      uint16_t type = r.u16();
      uint32_t length = r.u32();
      if (magic != kWireMagic) {
        error_ = fmt::format("bad magic {:#010x}", magic);
        state_ = State::kBad;
      } else if (version != kWireVersion) {
        error_ = fmt::format("protocol version {} (this side speaks {})", version, kWireVersion);
        state_ = State::kBad;
      } else if (!known_type(type)) {
        error_ = fmt::format("unknown frame type {}", type);
        state_ = State::kBad;
      } else if (length > frame_payload_cap(static_cast<FrameType>(type))) {
        error_ =
            fmt::format("{} frame of {} bytes exceeds its cap of {}", frame_type_name(static_cast<FrameType>(type)),
                        length, frame_payload_cap(static_cast<FrameType>(type)));
        state_ = State::kBad;
      } else {
        frame_.type = static_cast<FrameType>(type);
        payload_size_ = length;
        frame_.payload.clear();
        frame_.payload.reserve(length);
        if (length == 0) state_ = State::kFrame;
      }
      continue;
    }
    size_t n = std::min(size - used, payload_size_ - frame_.payload.size());
    frame_.payload.insert(frame_.payload.end(), data + used, data + used + n);
    used += n;
    if (frame_.payload.size() == payload_size_) state_ = State::kFrame;
  }
  return used;
}

Frame FrameParser::take() {
  Frame out = std::move(frame_);
  frame_ = Frame{};
  header_have_ = 0;
  payload_size_ = 0;
  state_ = State::kNeedMore;
  return out;
}

void send_frame(Socket& sock, FrameType type, const Bytes& payload, Deadline deadline, const std::atomic<bool>* stop) {
  Bytes frame = encode_frame(type, payload);
  sock.send_all(frame.data(), frame.size(), deadline, stop);
}

Frame recv_frame(Socket& sock, Deadline deadline, const std::atomic<bool>* stop) {
  FrameParser parser;
  uint8_t buf[4096];
  while (parser.state() == FrameParser::State::kNeedMore) {
    // Never read past this frame: the next one may belong to another reader.
    size_t want = std::min(parser.wanted(), sizeof(buf));
    sock.recv_all(buf, want, deadline, stop);
    parser.feed(buf, want);
  }
  if (parser.state() == FrameParser::State::kBad)
    fail(BAGUA_ERR_REMOTE, "bad frame from {}: {}", sock.peer_address().str(), parser.error());
  return parser.take();
}

Bytes encode_error(int32_t status, const std::string& message) {
  Writer w;
  w.i32(status);
  w.str(message.substr(0, 2000));
  return std::move(w.out());
}

void raise_error_frame(const Bytes& payload) {
  Reader r(payload, "ERROR frame");
  int32_t status = r.i32();
  std::string message = r.str(2048);
  // INTERNAL names a bug in this process; a peer's internal error reaches the caller as REMOTE (found by
  // fuzz_bootstrap), as does a status outside the range.
  if (status == BAGUA_ERR_INTERNAL) message = "a peer reported an internal error: " + message;
  if (status >= 0 || status < BAGUA_ERR_ABORTED || status == BAGUA_ERR_INTERNAL) status = BAGUA_ERR_REMOTE;
  throw Error(static_cast<bagua_status_t>(status), message);
}

}  // namespace bagua
