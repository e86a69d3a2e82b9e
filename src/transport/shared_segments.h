// Shared memory between the ranks of one host. Each rank creates one segment (an anonymous memfd) and maps
// every host peer's through /proc/<pid>/fd/<fd>, which needs the same permission as cross-memory attach. Pages
// are allocated on first touch, and the memory goes away with the last mapping, also when a process dies.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/bytes.h"

namespace bagua {

// A segment holds two sets (consecutive operations alternate) of two slots for each rank of the host: what the
// owner sends that rank goes through them, one piece after the other (algorithms/alltoall/shared_memory.cc).
// Slots are 512 KiB, smaller where that would make a segment larger than 32 MiB (more than 16 ranks), and one page
// at least.
constexpr size_t kSharedSegmentSlotsPerRank = 4;
constexpr size_t kSharedSegmentMostBytes = 32 << 20;
inline size_t shared_segment_slot_bytes(int nranks) {
  const size_t fit = kSharedSegmentMostBytes / kSharedSegmentSlotsPerRank / static_cast<size_t>(std::max(nranks, 1));
  return std::max<size_t>(4096, std::min<size_t>(512 << 10, fit / 4096 * 4096));
}

class SharedSegments {
 public:
  // This rank's segment for a host of nranks ranks, or nullptr with the reason in *why.
  static std::unique_ptr<SharedSegments> create(int rank, int nranks, std::string* why);
  ~SharedSegments();
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;

  // What host peers need to map this rank's segment: pid, fd and size.
  Bytes descriptor() const;
  // Maps the segment of every rank r with host_peer[r], from its descriptor. Empty on success, else why not.
  std::string map_peers(const std::vector<Bytes>& descriptors, const std::vector<bool>& host_peer);
  // Once every peer has mapped it, the descriptor is no longer needed: closes the fd.
  void close_descriptor();

  size_t bytes() const { return bytes_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* own() const { return own_; }
  // Rank r's segment, mapped here (nullptr when r is not a host peer).
  const uint8_t* of(int r) const { return r == rank_ ? own_ : mapped_[static_cast<size_t>(r)]; }

  // Operations that use the segments take turns in call order, the same on every rank: a ticket when the call is
  // made, then the operation starts once turn() reaches it and passes the turn on when it is done with the slots.
  uint64_t take_ticket() { return tickets_.fetch_add(1); }
  uint64_t turn() const { return turn_.load(); }
  void pass_turn(uint64_t ticket) {
    uint64_t expected = ticket;
    turn_.compare_exchange_strong(expected, ticket + 1);
  }

 private:
  SharedSegments() = default;
  int rank_ = 0;
  int fd_ = -1;
  size_t bytes_ = 0;
  size_t slot_bytes_ = 0;
  uint8_t* own_ = nullptr;
  std::vector<uint8_t*> mapped_;
  std::atomic<uint64_t> tickets_{0};
  std::atomic<uint64_t> turn_{0};
};

}  // namespace bagua
