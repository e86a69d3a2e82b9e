// How the kernels of src/kernels/cuda are launched: BAGUA_LAUNCH(kernel, grid, block, shared_bytes, stream, args...)
// is kernel<<<grid, block, shared_bytes, stream>>>(args...) under nvcc, and BAGUA_DYNAMIC_SHARED declares the
// dynamic shared memory. The SIMT emulator that runs these kernels on the CPU in the tests (tests/simt) defines
// both its own way before including a .cu file.
#pragma once

#ifndef BAGUA_LAUNCH
#define BAGUA_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
#define BAGUA_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
