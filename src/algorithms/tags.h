// UCX tag layout (docs/transport.md; tags carry the communicator, the operation sequence number and its kind):
//   63..60 kind | 59..48 communicator id (low 12 bits) | 47..32 sequence | 31..20 step | 19..0 source rank
// Collectives number their sequence per communicator (every rank calls them in the same order); point to
// point numbers it per ordered pair of ranks. A mismatch between ranks shows up as tags that never match.
// Kind 0 is the communicator's warm-up exchange at init (core/comm_init.cc).
#pragma once

#include <cstdint>

namespace bagua {

enum class TagKind : uint64_t {
  kP2P = 1,
  kAllreduce = 2,
  kReduceScatter = 3,
  kAllgather = 4,
  kBroadcast = 5,
  kReduce = 6,
  kAlltoall = 7,
  kAlltoallv = 8,
  kGather = 9,
  kScatter = 10,
  kBarrier = 11,
  kQuantized = 12,
  kNeighbor = 13,
  kLowPrecisionDecentralized = 14,
};

constexpr int kTagSourceBits = 20;
constexpr int kTagStepBits = 12;
constexpr int kTagSequenceBits = 16;
constexpr int kTagCommBits = 12;

constexpr uint64_t make_tag(TagKind kind, uint64_t comm_id, uint64_t sequence, uint64_t step, int source) {
  return (static_cast<uint64_t>(kind) << 60) | ((comm_id & 0xfffu) << 48) | ((sequence & 0xffffu) << 32) |
         ((step & 0xfffu) << 20) | (static_cast<uint64_t>(source) & 0xfffffu);
}

constexpr int tag_source(uint64_t tag) { return static_cast<int>(tag & 0xfffffu); }
constexpr uint64_t tag_step(uint64_t tag) { return (tag >> 20) & 0xfffu; }
constexpr uint64_t tag_sequence(uint64_t tag) { return (tag >> 32) & 0xffffu; }
constexpr TagKind tag_kind(uint64_t tag) { return static_cast<TagKind>(tag >> 60); }

}  // namespace bagua
