#include "algorithms/allreduce/ring_operation.h"

#include <algorithm>
#include <cstring>

#include "algorithms/patterns/ring.h"
#include "core/tags.h"
#include "kernels/cpu/reduce.h"
#include "kernels/dtype.h"

namespace bagua {

RingAllreduce::RingAllreduce(const RingAllreduceArgs& args, std::string description)
    : Operation(BAGUA_OPKIND_ALLREDUCE, std::move(description)), args_(args) {
  set_collective_sequence(args.sequence);
  elem_size_ = datatype_size(args.dtype);
  segment_elems_ = std::max<size_t>(1, args.segment_bytes / elem_size_);
  size_t largest_chunk = ring::chunk_size(args.count, args.nranks, 0);
  segments_ = std::max<uint64_t>(1, (largest_chunk + segment_elems_ - 1) / segment_elems_);
  total_units_ = args.nranks > 1 ? 2ull * (args.nranks - 1) * segments_ : 0;
  args_.window = std::max(1, args.window);
  // Chunks follow ring positions, which need not be ranks (host-adjacent order).
  if (args_.position < 0) args_.position = args.rank;
  if (args_.next < 0) args_.next = ring::next(args.rank, args.nranks);
  if (args_.prev < 0) args_.prev = ring::prev(args.rank, args.nranks);
  slots_.resize(args_.window);
}

RingAllreduce::UnitPlan RingAllreduce::plan(uint64_t unit) const {
  const int n = args_.nranks;
  const int r = args_.position;
  int t = static_cast<int>(unit / segments_);
  uint64_t j = unit % segments_;
  int send_chunk, recv_chunk;
  bool reduce = t < n - 1;
  if (reduce) {
    send_chunk = ring::reduce_scatter_send_chunk(r, n, t);
    recv_chunk = ring::reduce_scatter_recv_chunk(r, n, t);
  } else {
    send_chunk = ring::allgather_send_chunk(r, n, t - (n - 1));
    recv_chunk = ring::allgather_recv_chunk(r, n, t - (n - 1));
  }
  auto segment = [&](int chunk, size_t* offset, size_t* count) {
    size_t begin = ring::chunk_begin(args_.count, n, chunk);
    size_t size = ring::chunk_size(args_.count, n, chunk);
    size_t seg_begin = std::min<size_t>(size, j * segment_elems_);
    size_t seg_end = std::min<size_t>(size, (j + 1) * segment_elems_);
    *offset = begin + seg_begin;
    *count = seg_end - seg_begin;
  };
  UnitPlan p{};
  segment(send_chunk, &p.send_offset, &p.send_count);
  segment(recv_chunk, &p.recv_offset, &p.recv_count);
  p.reduce = reduce;
  p.owner_final = t == n - 2;
  return p;
}

void RingAllreduce::post_unit(Transport& transport, uint64_t unit) {
  Slot& slot = slots_[unit % slots_.size()];
  slot.unit = unit;
  UnitPlan p = plan(unit);
  auto* base = static_cast<uint8_t*>(args_.recvbuf);
  uint64_t recv_tag = make_tag(args_.fingerprint, args_.sequence, unit, args_.prev);
  uint64_t send_tag = make_tag(args_.fingerprint, args_.sequence, unit, args_.rank);
  void* recv_into =
      p.reduce ? scratch_.get() + (unit % slots_.size()) * slot_elems_ * elem_size_ : base + p.recv_offset * elem_size_;
  post_recv(transport, slot.recv, args_.prev, recv_tag, recv_into, p.recv_count * elem_size_, args_.unmatched_bits);
  // Reduce-scatter step 0 sends this rank's own chunk straight from sendbuf: no staging copy.
  const uint8_t* send_base = unit < segments_ ? static_cast<const uint8_t*>(args_.sendbuf) : base;
  post_send(transport, slot.send, args_.next, send_tag, send_base + p.send_offset * elem_size_,
            p.send_count * elem_size_);
}

bool RingAllreduce::complete_unit(Transport& transport, uint64_t unit) {
  Slot& slot = slots_[unit % slots_.size()];
  bool received = poll(transport, slot.recv);
  bool sent = poll(transport, slot.send);
  if (!received || !sent) return false;
  UnitPlan p = plan(unit);
  if (p.reduce) {
    // Each chunk arrives once during reduce-scatter: combine it with this rank's own contribution from
    // sendbuf (ours first, then the incoming partial sum), writing recvbuf; out of place needs no copy.
    auto* dst = static_cast<uint8_t*>(args_.recvbuf) + p.recv_offset * elem_size_;
    const auto* mine = static_cast<const uint8_t*>(args_.sendbuf) + p.recv_offset * elem_size_;
    const uint8_t* src = scratch_.get() + (unit % slots_.size()) * slot_elems_ * elem_size_;
    reduce_from(dst, mine, src, p.recv_count, args_.dtype, args_.op);
    if (p.owner_final && args_.op == BAGUA_AVG) divide_by(dst, p.recv_count, args_.dtype, args_.nranks);
  }
  return true;
}

void RingAllreduce::plan_staging(StagingWindow& window) {
  staged_ = std::make_unique<StagedSteps>(window, total_units_);
  const auto* send = static_cast<const uint8_t*>(args_.sendbuf);
  const auto* recv = static_cast<const uint8_t*>(args_.recvbuf);
  for (uint64_t unit = 0; unit < total_units_; ++unit) {
    const UnitPlan p = plan(unit);
    staged_->touch(unit, (unit < segments_ ? send : recv) + p.send_offset * elem_size_, p.send_count * elem_size_,
                   false);
    if (p.reduce) staged_->touch(unit, send + p.recv_offset * elem_size_, p.recv_count * elem_size_, false);
    staged_->touch(unit, recv + p.recv_offset * elem_size_, p.recv_count * elem_size_, true);
  }
  staged_->release_unwritten();
}

std::string RingAllreduce::waiting_for() const {
  return awaiting_input_ ? "the copy of its input from device memory" : Operation::waiting_for();
}

void RingAllreduce::advance(Transport& transport) {
  if (!started_) {
    StagingWindow* window = StagingWindow::current();
    awaiting_input_ = total_units_ == 0 && window && !window->arrived_all();
    if (awaiting_input_) return;
    started_ = true;
    if (total_units_ == 0) {  // one rank: the reduction of one contribution
      if (args_.sendbuf != args_.recvbuf && args_.count > 0)
        std::memcpy(args_.recvbuf, args_.sendbuf, args_.count * elem_size_);
      if (args_.op == BAGUA_AVG) divide_by(args_.recvbuf, args_.count, args_.dtype, args_.nranks);
      finish();
      return;
    }
    // A slot holds one segment; small messages need no more than their largest chunk.
    slot_elems_ = std::min(segment_elems_, ring::chunk_size(args_.count, args_.nranks, 0));
    scratch_.reset(new uint8_t[std::max<size_t>(1, slots_.size() * slot_elems_ * elem_size_)]);
    if (window) plan_staging(*window);
  }
  for (;;) {
    bool moved = false;
    // Post while the window has room and the unit's data is ready (unit - segments_ is complete).
    awaiting_input_ = false;
    while (next_post_ < total_units_ && next_post_ - head_ < slots_.size() &&
           (next_post_ < segments_ || next_post_ - segments_ < head_)) {
      awaiting_input_ = staged_ && !staged_->arrived(next_post_);
      if (awaiting_input_) break;
      post_unit(transport, next_post_++);
      moved = true;
    }
    // Complete units in order.
    while (head_ < next_post_ && complete_unit(transport, head_)) {
      if (staged_) staged_->finished(head_);
      ++head_;
      moved = true;
    }
    if (head_ == total_units_) {
      finish();
      return;
    }
    if (!moved) return;
  }
}

}  // namespace bagua
