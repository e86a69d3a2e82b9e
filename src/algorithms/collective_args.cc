#include "algorithms/collective_args.h"

#include "kernels/dtype.h"

namespace bagua {

namespace {
const char* const kCollectiveNames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                        "alltoall",  "alltoallv",      "gather",    "scatter",   "barrier"};
static_assert(sizeof(kCollectiveNames) / sizeof(kCollectiveNames[0]) == static_cast<size_t>(Collective::kCount));
}  // namespace

const char* collective_name(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }

bool parse_collective(const std::string& text, Collective* out) {
  for (int i = 0; i < static_cast<int>(Collective::kCount); ++i)
    if (text == kCollectiveNames[i]) {
      *out = static_cast<Collective>(i);
      return true;
    }
  return false;
}

TagKind tag_kind_of(Collective c) {
  static const TagKind kKinds[] = {
      TagKind::kAllreduce, TagKind::kReduceScatter, TagKind::kAllgather, TagKind::kBroadcast, TagKind::kReduce,
      TagKind::kAlltoall,  TagKind::kAlltoallv,     TagKind::kGather,    TagKind::kScatter,   TagKind::kBarrier};
  return kKinds[static_cast<int>(c)];
}

bagua_opkind_t opkind_of(Collective c) {
  static const bagua_opkind_t kKinds[] = {BAGUA_OPKIND_ALLREDUCE, BAGUA_OPKIND_REDUCE_SCATTER, BAGUA_OPKIND_ALLGATHER,
                                          BAGUA_OPKIND_BROADCAST, BAGUA_OPKIND_REDUCE,         BAGUA_OPKIND_ALLTOALL,
                                          BAGUA_OPKIND_ALLTOALLV, BAGUA_OPKIND_GATHER,         BAGUA_OPKIND_SCATTER,
                                          BAGUA_OPKIND_BARRIER};
  return kKinds[static_cast<int>(c)];
}

CollectiveArgs args_of(Collective c, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                       bagua_redop_t op, int root) {
  CollectiveArgs a;
  a.collective = c;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

size_t CollectiveArgs::message_bytes(int nranks) const {
  size_t bytes = count * datatype_size(dtype);
  switch (collective) {
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter: return bytes * static_cast<size_t>(nranks);
    case Collective::kAlltoallv:
      return 0;  // counts differ per rank; selection must not, so alltoallv is chosen as for an empty message
    default: return bytes;
  }
}

AlltoallvCounts::AlltoallvCounts(const CollectiveArgs& args, int nranks) {
  if (args.collective != Collective::kAlltoallv) return;
  for (const size_t* array : {args.sendcounts, args.sdispls, args.recvcounts, args.rdispls})
    counts_.insert(counts_.end(), array, array + nranks);
}

void AlltoallvCounts::point(CollectiveArgs& args) const {
  if (counts_.empty()) return;
  const size_t n = counts_.size() / 4;
  args.sendcounts = counts_.data();
  args.sdispls = counts_.data() + n;
  args.recvcounts = counts_.data() + 2 * n;
  args.rdispls = counts_.data() + 3 * n;
}

}  // namespace bagua
