// Under bagua-run -n N: send/recv in a ring, all-to-one, to self, and 64 messages in flight per pair,
// finished in scrambled order; every payload is checked element by element.
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "mp/mp_check.h"

namespace {
int g_rank, g_size;

int32_t payload(int from, int to, int k, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + k * 101 + static_cast<int>(i % 9973));
}

void fill(std::vector<int32_t>& buf, int from, int to, int k) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = payload(from, to, k, i);
}

bool matches(const std::vector<int32_t>& buf, int from, int to, int k) {
  for (size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != payload(from, to, k, i)) return false;
  return true;
}

void ring(bagua_comm_t comm) {
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  // 16-64 KiB: the receiver takes either the data or a single-copy header, by the sender's mode.
  for (size_t count :
       {size_t(0), size_t(1), size_t(1000), size_t(4096), size_t(10001), size_t(16383), size_t(300000)}) {
    std::vector<int32_t> out(count), in(count, -1);
    fill(out, g_rank, next, 0);
    bagua_request_t rreq, sreq;
    MP_OK(bagua_irecv(in.data(), count, BAGUA_INT32, prev, comm, &rreq));
    MP_OK(bagua_isend(out.data(), count, BAGUA_INT32, next, comm, &sreq));
    MP_OK(bagua_wait(sreq));
    MP_OK(bagua_wait(rreq));
    MP_CHECK(matches(in, prev, g_rank, 0));
  }
  // Blocking calls in an order that cannot deadlock: even ranks send first.
  if (g_size > 1) {
    std::vector<int32_t> out(5000), in(5000);
    fill(out, g_rank, next, 1);
    if (g_rank % 2 == 0) {
      MP_OK(bagua_send(out.data(), out.size(), BAGUA_INT32, next, comm, nullptr));
      MP_OK(bagua_recv(in.data(), in.size(), BAGUA_INT32, prev, comm, nullptr));
    } else {
      MP_OK(bagua_recv(in.data(), in.size(), BAGUA_INT32, prev, comm, nullptr));
      MP_OK(bagua_send(out.data(), out.size(), BAGUA_INT32, next, comm, nullptr));
    }
    MP_CHECK(matches(in, prev, g_rank, 1));
  }
}

void all_to_one(bagua_comm_t comm) {
  const size_t count = 70001;
  if (g_rank == 0) {
    std::vector<std::vector<int32_t>> in(g_size, std::vector<int32_t>(count, -1));
    std::vector<bagua_request_t> reqs;
    for (int r = 0; r < g_size; ++r) {
      bagua_request_t req;
      MP_OK(bagua_irecv(in[r].data(), count, BAGUA_INT32, r, comm, &req));
      reqs.push_back(req);
    }
    std::vector<int32_t> self(count);
    fill(self, 0, 0, 2);
    MP_OK(bagua_send(self.data(), count, BAGUA_INT32, 0, comm, nullptr));  // to itself
    for (bagua_request_t req : reqs) MP_OK(bagua_wait(req));
    for (int r = 0; r < g_size; ++r) MP_CHECK(matches(in[r], r, 0, 2));
  } else {
    std::vector<int32_t> out(count);
    fill(out, g_rank, 0, 2);
    MP_OK(bagua_send(out.data(), count, BAGUA_INT32, 0, comm, nullptr));
  }
}

void many_in_flight(bagua_comm_t comm) {
  const int kMessages = 64;
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  std::vector<std::vector<int32_t>> out(kMessages), in(kMessages);
  std::vector<bagua_request_t> reqs;
  for (int k = 0; k < kMessages; ++k) {
    size_t count = k == 7 ? 0 : (k % 8 == 0 ? 262144 : static_cast<size_t>(k) * 277 + 1);  // up to 68 KiB
    out[k].resize(count);
    in[k].assign(count, -1);
    fill(out[k], g_rank, next, k);
    bagua_request_t r, s;
    MP_OK(bagua_irecv(in[k].data(), count, BAGUA_INT32, prev, comm, &r));
    MP_OK(bagua_isend(out[k].data(), count, BAGUA_INT32, next, comm, &s));
    reqs.push_back(r);
    reqs.push_back(s);
  }
  std::mt19937 rng(42 + g_rank);
  std::shuffle(reqs.begin(), reqs.end(), rng);
  // Finish half with bagua_test polling, half with bagua_wait.
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i % 2 == 0) {
      MP_OK(bagua_wait(reqs[i]));
    } else {
      int done = 0;
      while (!done) {
        bagua_status_t s = bagua_test(reqs[i], &done);
        MP_CHECK(s == (done ? BAGUA_SUCCESS : BAGUA_IN_PROGRESS));
      }
    }
  }
  for (int k = 0; k < kMessages; ++k) MP_CHECK(matches(in[k], prev, g_rank, k));
}
// Large sends to two peers carry the same tag (sequence numbers count per peer) and take the single-copy path.
// Each send must complete only when its own receiver has read it: rank 0 overwrites a buffer as soon as its
// send is done, and the slow receiver must still see the original data.
void same_tag_two_peers(bagua_comm_t parent) {
  if (g_size < 3) return;
  // A fresh communicator, so both sends are the first to their peer and their tags are equal.
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_split(parent, 0, g_rank, &comm));
  const size_t count = 1 << 18;  // 1 MiB of int32
  if (g_rank == 0) {
    std::vector<int32_t> to1(count), to2(count);
    fill(to1, 0, 1, 7);
    fill(to2, 0, 2, 7);
    bagua_request_t r1, r2;
    MP_OK(bagua_isend(to1.data(), count, BAGUA_INT32, 1, comm, &r1));
    MP_OK(bagua_isend(to2.data(), count, BAGUA_INT32, 2, comm, &r2));
    MP_OK(bagua_wait(r1));
    std::fill(to1.begin(), to1.end(), -1);  // rank 1 must already have read it
    MP_OK(bagua_wait(r2));
    std::fill(to2.begin(), to2.end(), -1);
  } else if (g_rank <= 2) {
    if (g_rank == 1) usleep(200 * 1000);  // rank 2 reads first
    std::vector<int32_t> in(count);
    MP_OK(bagua_recv(in.data(), count, BAGUA_INT32, 0, comm, nullptr));
    MP_CHECK(matches(in, 0, g_rank, 7));
  }
  MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(comm));
}

}  // namespace

int main() {
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  MP_OK(bagua_comm_rank(comm, &g_rank));
  MP_OK(bagua_comm_size(comm, &g_size));
  ring(comm);
  all_to_one(comm);
  many_in_flight(comm);
  same_tag_two_peers(comm);
  // Argument errors leave the communicator usable.
  int32_t x = 0;
  MP_CHECK(bagua_send(&x, 1, BAGUA_INT32, g_size, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_recv(nullptr, 1, BAGUA_INT32, 0, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_send(&x, 1, static_cast<bagua_datatype_t>(42), 0, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_send(&x, SIZE_MAX / 2, BAGUA_INT32, 0, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_allreduce(&x, &x, 1, BAGUA_INT32, static_cast<bagua_redop_t>(9), comm, nullptr) ==
           BAGUA_ERR_INVALID_ARGUMENT);
  int32_t pair[3] = {1, 2, 3};
  MP_CHECK(bagua_allreduce(pair, pair + 1, 2, BAGUA_INT32, BAGUA_SUM, comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  // alltoallv: what a rank sends itself must fit where it receives it.
  std::vector<size_t> counts(g_size, 1), displs(g_size), small(g_size, 1);
  for (int p = 0; p < g_size; ++p) displs[p] = static_cast<size_t>(p);
  small[g_rank] = 0;
  std::vector<int32_t> sb(g_size), rb(g_size);
  MP_CHECK(bagua_alltoallv(sb.data(), counts.data(), displs.data(), rb.data(), small.data(), displs.data(), BAGUA_INT32,
                           comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_OK(bagua_allreduce(&x, &x, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr));
  MP_OK(bagua_barrier(comm, nullptr));
  MP_OK(bagua_comm_destroy(comm));
  if (g_rank == 0) std::printf("p2p on %d ranks: ok\n", g_size);
  return 0;
}
