// Compile-time selection of the kernels: the AVX2/FMA versions where the compiler targets them
// (GA_CPU_AVX2), the portable scalar versions otherwise.
#include "backends/cpu/quant.h"
#include "backends/cpu/quant_kernels.h"
#include "gpu_accel/error.h"

namespace ga::cpu {

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
#if GA_CPU_AVX2
  detail::checked_block_count("dequantize_row", type, n);  // the AVX2 path expects a validated length
  if (avx2::dequantize_row(type, src, dst, n)) return;
#endif
  scalar::dequantize_row(type, src, dst, n);
}

float dot_row(DType type, const void* row, const float* x, int64_t n) {
#if GA_CPU_AVX2
  // The FP4 and FP8 block types have no AVX2 kernel yet: they take the portable dot.
  if (type == DType::MXFP4 || type == DType::NVFP4 || type == DType::F8_B128) return scalar::dot_row(type, row, x, n);
  return avx2::dot_row(type, row, x, n);
#else
  return scalar::dot_row(type, row, x, n);
#endif
}

namespace detail {

int64_t checked_block_count(const char* entry, DType type, int64_t n) {
  const auto& tr = traits(type);
  GA_CHECK(n >= 0 && n % tr.block_size == 0, InvalidArgument, entry, ": ", n, " elements is not a multiple of the ",
           tr.name, " block size ", tr.block_size);
  return n / tr.block_size;
}

float dot_f32(const float* a, const float* b, int64_t n) {
#if GA_CPU_AVX2
  return avx2::dot_f32(a, b, n);
#else
  return scalar::dot_row(DType::F32, a, b, n);
#endif
}

}  // namespace detail
}  // namespace ga::cpu
