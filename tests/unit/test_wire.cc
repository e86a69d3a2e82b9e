// Bootstrap wire format: frames, field codecs, rendezvous messages and the unique id, with every limit.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"

using namespace bagua;

namespace {
FrameParser::State feed_all(FrameParser& parser, const Bytes& bytes) {
  size_t used = 0;
  while (used < bytes.size() && parser.state() == FrameParser::State::kNeedMore)
    used += parser.feed(bytes.data() + used, bytes.size() - used);
  return parser.state();
}

Bytes header(uint32_t magic, uint16_t version, uint16_t type, uint32_t length) {
  Writer w;
  w.u32(magic);
  w.u16(version);
  w.u16(type);
  w.u32(length);
  return w.out();
}
}  // namespace

TEST_CASE("frames round-trip, byte by byte and whole", "[wire]") {
  Bytes payload = {1, 2, 3, 4, 5};
  Bytes frame = encode_frame(FrameType::kData, payload);
  REQUIRE(frame.size() == kFrameHeaderSize + payload.size());
  // Little-endian header: "BGUA", version 2, type 6, length 5.
  CHECK(frame[0] == 'B');
  CHECK(frame[1] == 'G');
  CHECK(frame[2] == 'U');
  CHECK(frame[3] == 'A');
  CHECK(frame[4] == 2);
  CHECK(frame[6] == 6);
  CHECK(frame[8] == 5);

  FrameParser whole;
  REQUIRE(feed_all(whole, frame) == FrameParser::State::kFrame);
  Frame out = whole.take();
  CHECK(out.type == FrameType::kData);
  CHECK(out.payload == payload);

  FrameParser bytewise;
  for (uint8_t b : frame) {
    REQUIRE(bytewise.state() == FrameParser::State::kNeedMore);
    bytewise.feed(&b, 1);
  }
  REQUIRE(bytewise.state() == FrameParser::State::kFrame);
  CHECK(bytewise.take().payload == payload);
  CHECK(bytewise.state() == FrameParser::State::kNeedMore);
}

TEST_CASE("empty frames complete on the header alone", "[wire]") {
  FrameParser parser;
  REQUIRE(feed_all(parser, encode_frame(FrameType::kBye, {})) == FrameParser::State::kFrame);
  CHECK(parser.take().type == FrameType::kBye);
}

TEST_CASE("the parser refuses bad headers before allocating", "[wire]") {
  FrameParser parser;
  SECTION("bad magic") {
    CHECK(feed_all(parser, header(0xdeadbeef, kWireVersion, 2, 4)) == FrameParser::State::kBad);
    CHECK_THAT(parser.error(), Catch::Contains("magic"));
  }
  SECTION("other protocol version") {
    CHECK(feed_all(parser, header(kWireMagic, kWireVersion + 1, 2, 4)) == FrameParser::State::kBad);
    CHECK_THAT(parser.error(), Catch::Contains("protocol version"));
  }
  SECTION("unknown type") {
    CHECK(feed_all(parser, header(kWireMagic, kWireVersion, 99, 4)) == FrameParser::State::kBad);
  }
  SECTION("each type's cap") {
    for (uint16_t type = 1; type <= 8; ++type) {
      FrameParser p;
      size_t cap = frame_payload_cap(static_cast<FrameType>(type));
      CHECK(feed_all(p, header(kWireMagic, kWireVersion, type, static_cast<uint32_t>(cap + 1))) ==
            FrameParser::State::kBad);
      FrameParser ok;
      CHECK(feed_all(ok, header(kWireMagic, kWireVersion, type, static_cast<uint32_t>(cap))) ==
            (cap == 0 ? FrameParser::State::kFrame : FrameParser::State::kNeedMore));
    }
  }
  SECTION("a 4 GiB length from a stranger") {
    CHECK(feed_all(parser, header(kWireMagic, kWireVersion, 2, 0xffffffffu)) == FrameParser::State::kBad);
    CHECK_THAT(parser.error(), Catch::Contains("exceeds its cap"));
  }
}

TEST_CASE("the parser stops after one frame", "[wire]") {
  Bytes two = encode_frame(FrameType::kData, {7});
  Bytes second = encode_frame(FrameType::kBye, {});
  two.insert(two.end(), second.begin(), second.end());
  FrameParser parser;
  size_t used = parser.feed(two.data(), two.size());
  CHECK(used == kFrameHeaderSize + 1);
  REQUIRE(parser.state() == FrameParser::State::kFrame);
  parser.take();
  parser.feed(two.data() + used, two.size() - used);
  REQUIRE(parser.state() == FrameParser::State::kFrame);
  CHECK(parser.take().type == FrameType::kBye);
}

TEST_CASE("field reader checks every length against cap and remaining bytes", "[wire]") {
  Writer w;
  w.u8(0xab);
  w.u16(0x1234);
  w.u32(0xdeadbeef);
  w.u64(0x0102030405060708ull);
  w.i32(-5);
  w.str("hello");
  w.bytes({9, 8, 7});
  Reader r(w.out());
  CHECK(r.u8() == 0xab);
  CHECK(r.u16() == 0x1234);
  CHECK(r.u32() == 0xdeadbeef);
  CHECK(r.u64() == 0x0102030405060708ull);
  CHECK(r.i32() == -5);
  CHECK(r.str(16) == "hello");
  CHECK(r.bytes(16) == Bytes{9, 8, 7});
  CHECK_NOTHROW(r.expect_end());
  CHECK_THROWS_AS(r.u8(), Error);

  Writer big;
  big.u32(1000);  // claims 1000 bytes, has 2
  big.u16(0);
  Reader over(big.out());
  CHECK_THROWS_WITH(over.str(4096), Catch::Contains("longer than the message"));
  Reader capped(big.out());
  CHECK_THROWS_WITH(capped.str(10), Catch::Contains("longer than its cap"));

  Writer trailing;
  trailing.u32(1);
  trailing.u8(0);
  Reader t(trailing.out());
  t.u32();
  CHECK_THROWS_WITH(t.expect_end(), Catch::Contains("trailing"));
}

TEST_CASE("error frames keep the peer's status, but INTERNAL and unknown ones become REMOTE", "[wire]") {
  auto status_of = [](int32_t status) {
    try {
      raise_error_frame(encode_error(status, "why"));
    } catch (const Error& e) {
      return std::make_pair(e.status(), std::string(e.what()));
    }
    return std::make_pair(BAGUA_SUCCESS, std::string());
  };
  CHECK(status_of(BAGUA_ERR_INVALID_ARGUMENT).first == BAGUA_ERR_INVALID_ARGUMENT);
  CHECK(status_of(BAGUA_ERR_TIMEOUT).first == BAGUA_ERR_TIMEOUT);
  auto internal = status_of(BAGUA_ERR_INTERNAL);
  CHECK(internal.first == BAGUA_ERR_REMOTE);
  CHECK(internal.second.find("a peer reported an internal error: why") != std::string::npos);
  CHECK(status_of(0).first == BAGUA_ERR_REMOTE);
  CHECK(status_of(-100).first == BAGUA_ERR_REMOTE);
}

TEST_CASE("join requests round-trip and are range-checked", "[wire]") {
  JoinRequest req;
  req.group_key = 42;
  req.rank = 3;
  req.nranks = 4;
  req.config_hash = 0x1234;
  req.timeout_ms = 5000;
  req.info = {"boot/ipc:1", "host", 77, 4026531836u, "127.0.0.1:1000"};
  JoinRequest back = JoinRequest::decode(req.encode());
  CHECK(back.group_key == 42);
  CHECK(back.rank == 3);
  CHECK(back.nranks == 4);
  CHECK(back.config_hash == 0x1234);
  CHECK(back.info.host_id == "boot/ipc:1");
  CHECK(back.info.pid == 77);
  CHECK(back.info.pid_namespace == 4026531836u);
  CHECK(back.info.listen_addr == "127.0.0.1:1000");

  JoinRequest bad = req;
  bad.rank = 4;
  CHECK_THROWS_WITH(JoinRequest::decode(bad.encode()), Catch::Contains("outside [0, 4)"));
  bad = req;
  bad.nranks = 0;
  bad.rank = 0;
  CHECK_THROWS_AS(JoinRequest::decode(bad.encode()), Error);
  bad = req;
  bad.rank = -1;
  CHECK_THROWS_AS(JoinRequest::decode(bad.encode()), Error);
  bad = req;
  bad.info.hostname = std::string(300, 'x');  // over the 256-byte identity cap
  CHECK_THROWS_WITH(JoinRequest::decode(bad.encode()), Catch::Contains("cap"));
  Bytes truncated = req.encode();
  truncated.pop_back();
  CHECK_THROWS_WITH(JoinRequest::decode(truncated), Catch::Contains("malformed"));
}

TEST_CASE("job tables must list exactly the expected ranks", "[wire]") {
  JobTable table;
  table.comm_id = 99;
  table.ranks = {{"a", "h0", 1, 10, "127.0.0.1:1"}, {"b", "h1", 2, 11, "127.0.0.1:2"}};
  JobTable back = JobTable::decode(table.encode(), 2);
  CHECK(back.comm_id == 99);
  REQUIRE(back.ranks.size() == 2);
  CHECK(back.ranks[1].hostname == "h1");
  CHECK(back.ranks[1].pid_namespace == 11);
  CHECK_THROWS_AS(JobTable::decode(table.encode(), 3), Error);
}

TEST_CASE("unique ids round-trip and foreign bytes are refused", "[wire]") {
  UniqueId id;
  id.root = SockAddr::parse("127.0.0.1:4321");
  id.secret = Bytes(32, 0x5a);
  id.group_key = 0xfeedull;
  bagua_unique_id_t raw;
  id.encode(&raw);
  UniqueId back = UniqueId::decode(raw);
  CHECK(back.root.str() == "127.0.0.1:4321");
  CHECK(back.secret == id.secret);
  CHECK(back.group_key == 0xfeedull);

  bagua_unique_id_t zero{};
  try {
    UniqueId::decode(zero);
    FAIL("decoded an all-zero unique id");
  } catch (const Error& e) {
    CHECK(e.status() == BAGUA_ERR_INVALID_ARGUMENT);
  }
  raw.internal[8] = 99;  // corrupt the address length
  CHECK_THROWS_AS(UniqueId::decode(raw), Error);
}

TEST_CASE("addresses parse in every form and fail clearly", "[wire]") {
  CHECK(SockAddr::parse("127.0.0.1:80").str() == "127.0.0.1:80");
  CHECK(SockAddr::parse("[::1]:80").str() == "[::1]:80");
  CHECK(SockAddr::parse("localhost:80").port() == 80);
  CHECK_THROWS_WITH(SockAddr::parse("127.0.0.1"), Catch::Contains("host:port"));
  CHECK_THROWS_WITH(SockAddr::parse("127.0.0.1:0"), Catch::Contains("port"));
  CHECK_THROWS_WITH(SockAddr::parse("127.0.0.1:70000"), Catch::Contains("port"));
  CHECK_THROWS_WITH(SockAddr::parse("no-such-host.invalid:80"), Catch::Contains("cannot resolve"));
}
