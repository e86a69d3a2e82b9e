// Reduction loops compiled for avx512 (see reduce_impl.h).
#define BAGUA_REDUCE_NAMESPACE cpu_avx512
#include "kernels/cpu/reduce_impl.h"
