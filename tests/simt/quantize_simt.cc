// src/kernels/cuda/quantize.cu compiled for the SIMT emulator (simt.h).
#include "simt/simt.h"
// simt.h first
#include "kernels/cuda/quantize.cu"
