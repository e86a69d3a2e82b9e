// Asynchronous averaging's correction step (kernels/cpu/reduce.h); kernels/cuda/reduce.cu has the same.
#include "base/error.h"
#include "kernels/cpu/reduce.h"
#include "kernels/reduce_math.h"

namespace bagua {

namespace {
template <typename T>
void correct(T* x, const T* sum, const T* snapshot, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) x[i] = average_correction<T>(x[i], sum[i], snapshot[i], n);
}
}  // namespace

void average_correct(void* x, const void* sum, const void* snapshot, size_t count, bagua_datatype_t dtype, int n) {
  if (dtype == BAGUA_FLOAT32)
    correct(static_cast<float*>(x), static_cast<const float*>(sum), static_cast<const float*>(snapshot), count, n);
  else if (dtype == BAGUA_FLOAT64)
    correct(static_cast<double*>(x), static_cast<const double*>(sum), static_cast<const double*>(snapshot), count, n);
  else
    fail(BAGUA_ERR_INVALID_ARGUMENT, "averaging corrections are float32 or float64");
}

}  // namespace bagua
