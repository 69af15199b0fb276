// The split-KV decode attention's launches over an F16 cache and their explicit instantiations (the kernel and its
// design notes: attention_decode_kernel.cuh; the FP8 cache's: attention_decode_fp8.cu).
#include "backends/cuda/kernels/attention_decode_kernel.cuh"

namespace ga::cuda::detail {

bool decode_stages_supported(int head_dim, bool paged, int stages) {
  if (stages == 2) return true;
  return stages == 3 && paged && head_dim == 128 && kPagedDecode3StagesBuilt;
}

template <int HD>
cudaError_t launch_attention_decode(const AttnArgs& a, int row_tiles, cudaStream_t stream) {
  const bool paged = a.block_table != nullptr;
  if (a.decode_stages == 3) {
    if constexpr (HD == 128 && kPagedDecode3StagesBuilt) {
      if (paged) return launch_decode_kernel<HD, true, 3>(a, row_tiles, stream);
    }
    return cudaErrorNotSupported;  // attention_unsupported_reason refuses it first
  }
  return paged ? launch_decode_kernel<HD, true, 2>(a, row_tiles, stream)
               : launch_decode_kernel<HD, false, 2>(a, row_tiles, stream);
}

// CTAs of the decode kernel of `stages` stages one SM holds (the occupancy calculator). The paged
// and contiguous 2-stage kernels differ only in a few registers of the copy path; the split policy
// asks the contiguous one, which both occupy the same way (checked by the benchmark's table).
template <int HD>
int decode_ctas_per_sm(int stages) {
  if constexpr (HD == 128 && kPagedDecode3StagesBuilt) {
    if (stages == 3) return occupancy_of_decode_kernel<HD, true, 3>();
  }
  (void)stages;
  return occupancy_of_decode_kernel<HD, false, 2>();
}

// Whether the paged decode kernel of `stages` stages can merge its splits in a cluster on the current
// device: compute capability 9.0 or newer, and a kernel binary built for sm_90+ (a build for older
// archs only would run its sm_80 code on a Hopper device, where cluster_merge is a trap). The binary
// version is asked once (a process's devices of one generation load the same cubin); the device's
// compute capability per call, as attention.cu asks it.
template <int HD, int kStages>
bool cluster_merge_runs_here() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9) {
    (void)cudaGetLastError();
    return false;
  }
  static const int binary_version = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, attention_decode_kernel<HD, true, kStages>) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return attr.binaryVersion;
  }();
  return binary_version >= 90;
}

template <int HD>
bool decode_cluster_merge_supported(int stages) {
  if constexpr (HD == 128 && kPagedDecode3StagesBuilt) {
    if (stages == 3) return cluster_merge_runs_here<HD, 3>();
  }
  return stages == 2 && cluster_merge_runs_here<HD, 2>();
}

template bool decode_cluster_merge_supported<64>(int);
template bool decode_cluster_merge_supported<96>(int);
template bool decode_cluster_merge_supported<128>(int);
template bool decode_cluster_merge_supported<256>(int);
template int decode_ctas_per_sm<64>(int);
template int decode_ctas_per_sm<96>(int);
template int decode_ctas_per_sm<128>(int);
template int decode_ctas_per_sm<256>(int);
template cudaError_t launch_attention_decode<64>(const AttnArgs&, int, cudaStream_t);
template cudaError_t launch_attention_decode<96>(const AttnArgs&, int, cudaStream_t);
template cudaError_t launch_attention_decode<128>(const AttnArgs&, int, cudaStream_t);
template cudaError_t launch_attention_decode<256>(const AttnArgs&, int, cudaStream_t);

}  // namespace ga::cuda::detail
