// src/kernels/cuda/compress_extra.cu compiled for the SIMT emulator (simt.h).
#include "simt/simt.h"
// simt.h first
#include "kernels/cuda/compress_extra.cu"
