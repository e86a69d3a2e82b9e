// Reduction loops compiled for avx2 (see reduce_impl.h).
#define BAGUA_REDUCE_NAMESPACE cpu_avx2
#include "kernels/cpu/reduce_impl.h"
