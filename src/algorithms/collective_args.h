// The collectives and one struct for any call's arguments: what the dispatcher checks and every algorithm reads.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bagua/bagua.h"
#include "core/tags.h"

namespace bagua {

enum class Collective {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAlltoall,
  kAlltoallv,
  kGather,
  kScatter,
  kBarrier,
  kCount
};

const char* collective_name(Collective c);  // "allreduce"
bool parse_collective(const std::string& text, Collective* out);
TagKind tag_kind_of(Collective c);
bagua_opkind_t opkind_of(Collective c);

// The ranks of each host (host order as Comm::hosts); one entry for a single-host communicator.
using HostLayout = std::vector<std::vector<int>>;

struct CollectiveArgs {
  Collective collective = Collective::kAllreduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  // allreduce/broadcast/reduce: count; allgather/gather: per-rank send count; reduce_scatter/scatter:
  // per-rank receive count; alltoall: count per peer.
  size_t count = 0;
  bagua_datatype_t dtype = BAGUA_FLOAT32;
  bagua_redop_t op = BAGUA_SUM;
  int root = 0;
  const size_t* sendcounts = nullptr;  // alltoallv, in elements
  const size_t* sdispls = nullptr;
  const size_t* recvcounts = nullptr;
  const size_t* rdispls = nullptr;
  void* stream = nullptr;  // the caller's cudaStream_t, for device memory
  // The library's own calls may name a registry row (the bucket scheduler's flat or hierarchical choice);
  // nullptr: BAGUA_ALGO rules, then the cost model.
  const char* algorithm = nullptr;

  // A blocking call outside a group: on device memory, its work may go in phases on the caller's stream
  // (DeviceOperation::compute_on_caller_stream), which a request or a group member cannot.
  bool phases_allowed = false;
  // A blocking call inside a group: staged, with the caller's-stream form kept as an alternative that
  // bagua_group_end takes where the group allows it (DeviceOperation::set_caller_stream_alternative).
  bool in_group = false;

  // Set by check_collective_args: where the buffers live, and the bytes of each this rank reads or writes.
  bool on_device = false;
  int device = -1;
  size_t send_extent = 0;
  size_t recv_extent = 0;

  // Bytes this rank moves into the collective (what selection reasons about): count x datatype size,
  // times nranks for the per-rank-count collectives.
  size_t message_bytes(int nranks) const;
};

// alltoallv's count arrays belong to the caller, who may free them once the call returns: an operation that reads
// them later keeps a copy and points its arguments at it.
class AlltoallvCounts {
 public:
  AlltoallvCounts() = default;
  AlltoallvCounts(const CollectiveArgs& args, int nranks);
  void point(CollectiveArgs& args) const;

 private:
  std::vector<size_t> counts_;  // sendcounts, sdispls, recvcounts, rdispls
};

// The arguments of a call with one count (every collective but alltoallv).
CollectiveArgs args_of(Collective c, const void* sendbuf, void* recvbuf, size_t count, bagua_datatype_t dtype,
                       bagua_redop_t op = BAGUA_SUM, int root = 0);

}  // namespace bagua
