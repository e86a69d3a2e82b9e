// Reduction loops compiled for scalar (see reduce_impl.h).
#define BAGUA_REDUCE_NAMESPACE cpu_scalar
#include "kernels/cpu/reduce_impl.h"
