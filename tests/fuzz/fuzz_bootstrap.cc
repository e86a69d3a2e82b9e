// libFuzzer target: the bootstrap's frame parser and what parses frame payloads (HELLO verification, the join
// request, the job table, error frames, the unique id). Input: bytes fed to the parser in chunks whose sizes come
// from the input itself. An Error is a refusal (fine) unless INTERNAL; a crash, a sanitizer report or another exception
// is a bug.
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "bootstrap/handshake.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"

using namespace bagua;

namespace {

void parse_payload(const Frame& frame, uint8_t selector) {
  try {
    switch (frame.type) {
      case FrameType::kHello: {
        Bytes body, welcome;
        std::string why;
        const Bytes secret = (selector & 1) ? Bytes{1, 2, 3, 4} : Bytes{};
        verify_hello(secret, Bytes(16, 7), frame.payload, &body, &welcome, &why);
        JoinRequest::decode(frame.payload);
        break;
      }
      case FrameType::kTable: JobTable::decode(frame.payload, 1 + selector % 8); break;
      case FrameType::kError: raise_error_frame(frame.payload);
      default: JoinRequest::decode(frame.payload); break;
    }
  } catch (const Error& e) {
    if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= sizeof(bagua_unique_id_t)) {
    bagua_unique_id_t id;
    std::memcpy(&id, data, sizeof id);
    try {
      UniqueId::decode(id);
    } catch (const Error& e) {
      if (e.status() == BAGUA_ERR_INTERNAL) __builtin_trap();  // a bug, not a refusal
    }
  }
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  FrameParser parser;
  size_t at = 1, chunk = 1 + selector % 13;
  while (at < size) {
    size_t took = parser.feed(data + at, std::min(chunk, size - at));
    at += took;
    if (parser.state() == FrameParser::State::kBad) break;
    if (parser.state() == FrameParser::State::kFrame) parse_payload(parser.take(), selector);
    if (took == 0 && parser.state() == FrameParser::State::kNeedMore) break;
  }
  return 0;
}
