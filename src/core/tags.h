// UCX tag layout (docs/transport.md). Each communicator has its own UCX worker, so tags need not name it.
//   63..62 space | 61..44 call fingerprint | 43..32 sequence | 31..20 step | 19..0 source rank
// space: 0 the warm-up exchange at init (core/comm_init.cc), 1 point to point, 2 collectives and relaxations,
// 3 the transport's own acknowledgements. Collectives number their sequence per communicator (every rank calls
// them in the same order); point to point numbers it per ordered pair of ranks. Sequence and step wrap; UCX
// matches messages of one sender in order, so a wrap is harmless while fewer than 4096 calls are in flight.
//
// Receives match on every field but the fingerprint, and compare it when a message arrives: a message of a
// different call (another collective, datatype, reduction, count, root or algorithm) under the same sequence
// fails the receive with INVALID_USAGE naming both calls, instead of being reduced into a wrong result.
// fingerprint = kind (4 bits) | datatype (4) | reduction op (3) | check (7): a hash of the call's count, root,
// algorithm and settings.
#pragma once

#include <cstdint>
#include <string>

#include "bagua/bagua.h"

namespace bagua {

enum class TagKind : uint64_t {
  kWarmUp = 0,
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
constexpr int kTagSequenceBits = 12;
constexpr int kTagFingerprintShift = 44;
constexpr uint64_t kTagFingerprintMask = ((uint64_t{1} << 18) - 1) << kTagFingerprintShift;
constexpr uint64_t kTagSpaceMask = uint64_t{3} << 62;
constexpr uint64_t kTagSourceMask = (uint64_t{1} << kTagSourceBits) - 1;
constexpr uint64_t kTagSpaceAcknowledgement = 3;

// What else every rank's call must agree on: the count, which enters the 7-bit check linearly (so counts that
// differ by less than 128 always differ there; a multiple of 128 apart, the message sizes differ), and a hash of
// the rest (root, algorithm, settings; mix_details).
struct CallDetails {
  uint64_t count = 0;
  uint64_t rest = 0;
};
// A call's 18-bit fingerprint. Datatype and reduction op enter only where they matter (no op for a broadcast,
// nothing for a barrier).
uint64_t call_fingerprint(TagKind kind, bagua_datatype_t dtype, bagua_redop_t op, CallDetails details);
// A fingerprint that carries the kind only (BAGUA_FINGERPRINT=0; receives then match it exactly).
constexpr uint64_t kind_only_fingerprint(TagKind kind) { return static_cast<uint64_t>(kind) << 14; }
// Mixes a value into a details hash (order matters).
constexpr uint64_t mix_details(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xbf58476d1ce4e5b9ull;
}
uint64_t hash_name(const char* name);  // for algorithm names in details

constexpr TagKind fingerprint_kind(uint64_t fingerprint) { return static_cast<TagKind>((fingerprint >> 14) & 0xfu); }
constexpr uint64_t tag_space_of(TagKind kind) { return kind == TagKind::kWarmUp ? 0 : (kind == TagKind::kP2P ? 1 : 2); }

constexpr uint64_t make_tag(uint64_t fingerprint, uint64_t sequence, uint64_t step, int source) {
  return (tag_space_of(fingerprint_kind(fingerprint)) << 62) | ((fingerprint & 0x3ffffu) << kTagFingerprintShift) |
         ((sequence & 0xfffu) << 32) | ((step & 0xfffu) << 20) | (static_cast<uint64_t>(source) & kTagSourceMask);
}

constexpr int tag_source(uint64_t tag) { return static_cast<int>(tag & kTagSourceMask); }
constexpr uint64_t tag_step(uint64_t tag) { return (tag >> 20) & 0xfffu; }
constexpr uint64_t tag_sequence(uint64_t tag) { return (tag >> 32) & 0xfffu; }
constexpr uint64_t tag_fingerprint(uint64_t tag) { return (tag & kTagFingerprintMask) >> kTagFingerprintShift; }
constexpr TagKind tag_kind(uint64_t tag) { return fingerprint_kind(tag_fingerprint(tag)); }
constexpr uint64_t tag_space(uint64_t tag) { return tag >> 62; }

const char* tag_kind_name(TagKind kind);  // "allreduce"
// "allreduce of float32 with sum": what a fingerprint says about a call.
std::string describe_fingerprint(uint64_t fingerprint);
// Why a receive failed: rank `peer` sent a message of another call under this call's sequence number.
std::string describe_call_mismatch(uint64_t expected_tag, uint64_t sender_tag, int peer);
// A message no receive of this rank matched, for timeout and stranded-message errors.
std::string describe_message(uint64_t sender_tag);

}  // namespace bagua
