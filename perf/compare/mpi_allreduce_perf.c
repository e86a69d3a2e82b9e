/* The same sweep as bagua_allreduce_perf, with Open MPI: MPI_Allreduce(MPI_IN_PLACE, float, sum) in a loop.
 * Prints "size time_us busbw_GBps" per size (time: average per call, slowest rank). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t min_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
  size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 64u << 20;
  int factor = argc > 3 ? atoi(argv[3]) : 4;
  int iters = argc > 4 ? atoi(argv[4]) : 20;
  float* buf = malloc(max_bytes);
  for (size_t i = 0; i < max_bytes / sizeof(float); ++i) buf[i] = 1.0f;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    for (int i = 0; i < 5; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) * 1e6 / iters, worst;
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double busbw = (double)bytes / (worst / 1e6) / 1e9 * 2.0 * (size - 1) / size;
    if (rank == 0) printf("%zu %.2f %.3f\n", bytes, worst, busbw);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
