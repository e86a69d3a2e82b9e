// Hierarchical collectives for communicators that span hosts (ScheduleContext::hosts lists each host's ranks).
//
//   allreduce "hier" (rail): ring reduce-scatter inside each host, ring allreduce of each block across hosts
//     among the ranks with the same local index (every local rank busy), ring allgather inside each host.
//     Needs the same number of ranks on every host. Inter-host traffic per host: 2(H-1)/H of the vector.
//   allreduce "hier_leader": reduce to one leader per host, ring allreduce among leaders, broadcast inside
//     each host. Any layout (3+1, single-rank hosts).
//   reduce / broadcast "hier": through the host leaders (on the root's host the root leads), binomial tree
//     among leaders. allgather "hier": gather to leaders, leaders exchange host bundles, leaders broadcast.
//
// Phases of different groups run in the same schedule rounds; a phase whose groups differ in size is padded
// with empty rounds so every rank numbers rounds alike (tags carry the round).
#pragma once

#include <vector>

#include "algorithms/block_layout.h"
#include "algorithms/collective_args.h"
#include "algorithms/schedule.h"

namespace bagua {

// AlgorithmEntry::supports of the leader-based algorithms: any layout of two hosts or more.
inline bool on_several_hosts(int, const HostLayout& hosts) { return hosts.size() >= 2; }

struct Place {
  int host = 0;   // index into ctx.hosts()
  int local = 0;  // index into ctx.hosts()[host]
};

Place place_of(const ScheduleContext& ctx, int rank);
void pad_to(Schedule& s, size_t start, size_t rounds);
void group_reduce_scatter(Schedule& s, const std::vector<int>& group, int me, const BlockLayout& blocks,
                          const uint8_t* src, uint8_t* out, size_t pad_rounds);
void group_allgather(Schedule& s, const std::vector<int>& group, int me, const BlockLayout& blocks, uint8_t* region,
                     size_t pad_rounds);
int group_pieces(size_t count, int g, bagua_datatype_t dtype, bool pipelined);
size_t group_allreduce_rounds(size_t count, int g, bagua_datatype_t dtype, bool pipelined);
void group_allreduce(Schedule& s, const std::vector<int>& group, int me, uint8_t* buf, size_t count,
                     const CollectiveArgs& a, bool pipelined);
std::vector<int> leaders(const ScheduleContext& ctx, int root);
void gather_to_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                      const uint8_t* data, size_t bytes, uint8_t* slots, size_t slot_stride);
void reduce_to_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                      const void* sendbuf, uint8_t* acc, size_t count, size_t bytes);
void broadcast_from_leader(Schedule& s, const ScheduleContext& ctx, int leader, const std::vector<int>& host,
                           uint8_t* buf, size_t bytes);

}  // namespace bagua
