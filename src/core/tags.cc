#include "core/tags.h"

#include <fmt/format.h>

#include "kernels/dtype.h"

namespace bagua {

namespace {
bool uses_dtype(TagKind kind) { return kind != TagKind::kBarrier && kind != TagKind::kWarmUp; }
bool uses_op(TagKind kind) {
  return kind == TagKind::kAllreduce || kind == TagKind::kReduceScatter || kind == TagKind::kReduce ||
         kind == TagKind::kQuantized;
}
uint64_t dtype_bits(uint64_t fingerprint) { return (fingerprint >> 10) & 0xfu; }
uint64_t op_bits(uint64_t fingerprint) { return (fingerprint >> 7) & 0x7u; }
uint64_t check_bits(uint64_t fingerprint) { return fingerprint & 0x7fu; }
}  // namespace

uint64_t call_fingerprint(TagKind kind, bagua_datatype_t dtype, bagua_redop_t op, CallDetails details) {
  uint64_t d = uses_dtype(kind) ? static_cast<uint64_t>(dtype) & 0xfu : 0;
  uint64_t o = uses_op(kind) ? static_cast<uint64_t>(op) & 0x7u : 0;
  uint64_t h = mix_details(details.rest, 0x62616775u);  // "bagu"
  uint64_t check = (details.count + (h >> 57)) & 0x7fu;
  return (static_cast<uint64_t>(kind) << 14) | (d << 10) | (o << 7) | check;
}

uint64_t hash_name(const char* name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* c = name; c && *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

const char* tag_kind_name(TagKind kind) {
  switch (kind) {
    case TagKind::kWarmUp: return "warm-up";
    case TagKind::kP2P: return "point to point";
    case TagKind::kAllreduce: return "allreduce";
    case TagKind::kReduceScatter: return "reduce_scatter";
    case TagKind::kAllgather: return "allgather";
    case TagKind::kBroadcast: return "broadcast";
    case TagKind::kReduce: return "reduce";
    case TagKind::kAlltoall: return "alltoall";
    case TagKind::kAlltoallv: return "alltoallv";
    case TagKind::kGather: return "gather";
    case TagKind::kScatter: return "scatter";
    case TagKind::kBarrier: return "barrier";
    case TagKind::kQuantized: return "quantized_allreduce";
    case TagKind::kNeighbor: return "neighbor_allreduce";
    case TagKind::kLowPrecisionDecentralized: return "lpdec";
  }
  return "an unknown call";
}

std::string describe_fingerprint(uint64_t fingerprint) {
  TagKind kind = fingerprint_kind(fingerprint);
  std::string out = tag_kind_name(kind);
  if (uses_dtype(kind) && dtype_bits(fingerprint) < kNumDatatypes)
    out += fmt::format(" of {}", datatype_name(static_cast<bagua_datatype_t>(dtype_bits(fingerprint))));
  if (uses_op(kind) && op_bits(fingerprint) < kNumRedops)
    out += fmt::format(" with {}", redop_name(static_cast<bagua_redop_t>(op_bits(fingerprint))));
  return out;
}

std::string describe_call_mismatch(uint64_t expected_tag, uint64_t sender_tag, int peer) {
  uint64_t ours = tag_fingerprint(expected_tag), theirs = tag_fingerprint(sender_tag);
  std::string differs;
  auto add = [&](bool differ, const char* what) {
    if (differ) differs += fmt::format("{}{}", differs.empty() ? "" : ", ", what);
  };
  add(fingerprint_kind(ours) != fingerprint_kind(theirs), "the call");
  if (fingerprint_kind(ours) == fingerprint_kind(theirs)) {
    add(dtype_bits(ours) != dtype_bits(theirs), "the datatype");
    add(op_bits(ours) != op_bits(theirs), "the reduction op");
    add(check_bits(ours) != check_bits(theirs), "the count, root, algorithm or settings");
  }
  if (fingerprint_kind(ours) == TagKind::kP2P && fingerprint_kind(theirs) == TagKind::kP2P) {
    auto dtype = [](uint64_t fp) {
      return dtype_bits(fp) < kNumDatatypes ? datatype_name(static_cast<bagua_datatype_t>(dtype_bits(fp))) : "?";
    };
    return fmt::format(
        "the send does not match the receive: rank {} sent {} where this rank receives {} (they differ "
        "in {})",
        peer, dtype(theirs), dtype(ours), dtype_bits(ours) != dtype_bits(theirs) ? "the datatype" : "the count");
  }
  return fmt::format("the ranks' calls differ: rank {} called {} where this rank called {} (they differ in {})", peer,
                     describe_fingerprint(theirs), describe_fingerprint(ours), differs);
}

std::string describe_message(uint64_t sender_tag) {
  uint64_t space = tag_space(sender_tag);
  if (space == 1) return fmt::format("a send (#{} mod 4096)", tag_sequence(sender_tag));
  if (space != 2) return fmt::format("an internal message (tag {:#x})", sender_tag);
  return fmt::format("{} (collective #{} mod 4096)", describe_fingerprint(tag_fingerprint(sender_tag)),
                     tag_sequence(sender_tag));
}

}  // namespace bagua
