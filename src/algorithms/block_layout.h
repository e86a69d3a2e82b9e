// Block b of a buffer split among nranks: uniform (count elements each) or balanced over a total count
// (sizes differ by at most one element, as ring::chunk_*).
#pragma once

#include <cstddef>

#include "algorithms/collective_args.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/schedule.h"
#include "kernels/dtype.h"

namespace bagua {

class BlockLayout {
 public:
  static BlockLayout uniform(size_t per_block, int nranks, bagua_datatype_t dtype) {
    return BlockLayout(per_block * static_cast<size_t>(nranks), nranks, datatype_size(dtype), per_block);
  }
  static BlockLayout balanced(size_t total, int nranks, bagua_datatype_t dtype) {
    return BlockLayout(total, nranks, datatype_size(dtype), 0);
  }
  size_t offset(int b) const { return uniform_ ? uniform_ * b : ring::chunk_begin(total_, nranks_, b); }
  size_t count(int b) const { return uniform_ ? uniform_ : ring::chunk_size(total_, nranks_, b); }
  size_t offset_bytes(int b) const { return offset(b) * elem_; }
  size_t bytes(int b) const { return count(b) * elem_; }

 private:
  BlockLayout(size_t total, int nranks, size_t elem, size_t uniform)
      : total_(total), nranks_(nranks), elem_(elem), uniform_(uniform) {}
  size_t total_;
  int nranks_;
  size_t elem_;
  size_t uniform_;  // elements per block, or 0 for balanced
};

// Ring reduce-scatter rounds over `blocks` of the full input `src`: rank r ends with block r reduced into
// `out`. Shared by reduce_scatter and the large-message reduce.
void ring_reduce_scatter_rounds(Schedule& s, const BlockLayout& blocks, const uint8_t* src, uint8_t* out);

// Allgather: our block goes into place first unless it is already there (in place). Returns recvbuf.
uint8_t* allgather_prologue(Schedule& s, const CollectiveArgs& a, const BlockLayout& blocks);

}  // namespace bagua
