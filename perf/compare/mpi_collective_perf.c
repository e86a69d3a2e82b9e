/* The same sweeps as bagua_allreduce_perf and bagua_alltoall_perf, with Open MPI, in place for allreduce:
 *   mpi_collective_perf allreduce|alltoall [min_bytes max_bytes factor iterations [written]]
 * written = 1: the input is written before every call and the calls are timed alone (bagua's -W 1).
 * allreduce: MPI_Allreduce(MPI_IN_PLACE, float, sum); alltoall: MPI_Alltoall of size / nranks bytes per peer.
 * 5 warm-up calls per size. Prints "size time_us busbw_GBps" per size (time: average per call, slowest rank;
 * busbw as nccl-tests: allreduce x 2(n-1)/n, alltoall x (n-1)/n). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void call(int alltoall, float* buf, float* out, int count, int per_peer) {
  if (alltoall)
    MPI_Alltoall(buf, per_peer, MPI_FLOAT, out, per_peer, MPI_FLOAT, MPI_COMM_WORLD);
  else
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "alltoall") != 0 && strcmp(argv[1], "allreduce") != 0) {
    fprintf(stderr, "usage: %s allreduce|alltoall [min_bytes max_bytes factor iterations [written]]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int alltoall = argc > 1 && strcmp(argv[1], "alltoall") == 0;
  size_t min_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
  size_t max_bytes = argc > 3 ? strtoull(argv[3], NULL, 10) : 64u << 20;
  int factor = argc > 4 ? atoi(argv[4]) : 4;
  int iters = argc > 5 ? atoi(argv[5]) : 20;
  int written = argc > 6 ? atoi(argv[6]) : 0;
  float* buf = malloc(max_bytes);
  float* out = malloc(max_bytes);
  for (size_t i = 0; i < max_bytes / sizeof(float); ++i) buf[i] = 1.0f;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    int per_peer = count / size;
    for (int i = 0; i < 5; ++i) call(alltoall, buf, out, count, per_peer);
    MPI_Barrier(MPI_COMM_WORLD);
    double us = 0, worst;
    if (written) {
      for (int i = 0; i < iters; ++i) {
        memset(buf, 0x3e + (i & 1), bytes);
        double start = MPI_Wtime();
        call(alltoall, buf, out, count, per_peer);
        us += (MPI_Wtime() - start) * 1e6;
      }
      us /= iters;
    } else {
      double start = MPI_Wtime();
      for (int i = 0; i < iters; ++i) call(alltoall, buf, out, count, per_peer);
      us = (MPI_Wtime() - start) * 1e6 / iters;
    }
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double factor_bw = alltoall ? (double)(size - 1) / size : 2.0 * (size - 1) / size;
    double busbw = (double)bytes / (worst / 1e6) / 1e9 * factor_bw;
    if (rank == 0) printf("%zu %.2f %.3f\n", bytes, worst, busbw);
  }
  free(out);
  free(buf);
  MPI_Finalize();
  return 0;
}
