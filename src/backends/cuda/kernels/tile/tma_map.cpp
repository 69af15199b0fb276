// cuTensorMapEncodeTiled through the runtime's driver entry point (see tma_map.h for why).
#include "backends/cuda/kernels/tile/tma_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <mutex>

namespace ga::cuda::tile {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
  });
  return fn;
}

const char* encode_sw128(CUtensorMap* map, CUtensorMapDataType type, const void* base, const uint64_t dims[4],
                         const uint64_t strides_bytes[3], const uint32_t box[4]) {
  // Limits of cuTensorMapEncodeTiled (CUDA driver API docs), checked here to name the one that failed.
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "TMA needs a 16-byte aligned base pointer";
  for (int i = 0; i < 3; ++i) {
    if (strides_bytes[i] % 16 != 0) return "TMA needs every stride (sequence, head, batch) to be a multiple of 16 B";
    if (strides_bytes[i] >= (uint64_t{1} << 40)) return "TMA strides must be below 2^40 bytes";
  }
  for (int i = 0; i < 4; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return "TMA tensor extents must lie in [1, 2^32]";
  }
  PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  if (fn == nullptr) return "the CUDA driver offers no cuTensorMapEncodeTiled (driver older than CUDA 12)";
  const cuuint64_t g_dims[4] = {dims[0], dims[1], dims[2], dims[3]};
  const cuuint64_t g_strides[3] = {strides_bytes[0], strides_bytes[1], strides_bytes[2]};
  const cuuint32_t g_box[4] = {box[0], box[1], box[2], box[3]};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = fn(map, type, 4, const_cast<void*>(base), g_dims, g_strides, g_box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled refused the tensor (shape, strides or alignment)";
}

}  // namespace

const char* encode_tma_map_16bit_sw128(CUtensorMap* map, bool is_bf16, const void* base, const uint64_t dims[4],
                                       const uint64_t strides_bytes[3], const uint32_t box[4]) {
  return encode_sw128(map, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, base, dims,
                      strides_bytes, box);
}

const char* encode_tma_map_8bit_sw128(CUtensorMap* map, const void* base, const uint64_t dims[4],
                                      const uint64_t strides_bytes[3], const uint32_t box[4]) {
  return encode_sw128(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, dims, strides_bytes, box);
}

const char* encode_tma_map_bshd(CUtensorMap* map, int elem_bytes, bool is_bf16, const void* base, int head_dim,
                                int seqlen, int heads, int batch, int64_t seq_stride, int64_t head_stride,
                                int64_t batch_stride, int box_rows) {
  const auto bytes = [elem_bytes](int64_t stride_elems, int extent) {
    return (extent == 1 || stride_elems == 0) ? uint64_t{16} : static_cast<uint64_t>(stride_elems * elem_bytes);
  };
  const uint64_t dims[4] = {static_cast<uint64_t>(head_dim), static_cast<uint64_t>(seqlen),
                            static_cast<uint64_t>(heads), static_cast<uint64_t>(batch)};
  const uint64_t strides[3] = {bytes(seq_stride, seqlen), bytes(head_stride, heads), bytes(batch_stride, batch)};
  const uint32_t box[4] = {static_cast<uint32_t>(128 / elem_bytes), static_cast<uint32_t>(box_rows), 1, 1};
  return elem_bytes == 1 ? encode_tma_map_8bit_sw128(map, base, dims, strides, box)
                         : encode_tma_map_16bit_sw128(map, is_bf16, base, dims, strides, box);
}

}  // namespace ga::cuda::tile
