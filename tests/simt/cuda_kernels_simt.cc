// tests/cuda/cuda_kernels.cu on the SIMT emulator: every CUDA kernel against the CPU reference, without a GPU.
#include "simt/simt.h"
// simt.h first
#include "cuda/cuda_kernels.cu"
