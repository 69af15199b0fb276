// Embedding gather: token ids -> float rows, for every weight type the GEMV reads.
//
// One block per (token, ~2 KB segment of the row): the segment's bytes are staged in shared memory
// with aligned 16-byte loads (the same scheme and decoders as the GEMV, so a row of Q6_K at an odd
// byte offset is read like any other), then each thread decodes (block, part) units and writes
// w = scale * q + min with explicit round-to-nearest multiply and add: no FMA contraction, so the
// result is bit-identical to ga::cpu::dequantize_row (which also forms scale first, then scale*q,
// then + min). The op is tiny (one row per token), so simplicity wins over bandwidth here.
#include <cmath>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/dispatch.cuh"
#include "backends/cuda/kernels/ops.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kEmbThreads = 128;
constexpr int kEmbStageBytes = kEmbThreads * 16;  // one 16-byte chunk per thread

struct EmbeddingArgs {
  const uint8_t* w;
  const uint8_t* w_end;
  int64_t n_rows_w;
  int64_t row_stride;
  int64_t blocks_per_row;
  const int32_t* ids;
  float* out;
  int64_t ld_out;
};

// Weight blocks per staged segment (a segment plus its up-to-15-byte misalignment fits the stage).
template <class D>
struct EmbGeometry {
  static constexpr int kBlocksPerSeg = (kEmbStageBytes - 16) / D::kBlockBytes;
};

template <class D>
__global__ void __launch_bounds__(kEmbThreads) embedding_kernel(const EmbeddingArgs a) {
  constexpr int kBlocksPerSeg = EmbGeometry<D>::kBlocksPerSeg;
  constexpr int kRuns = D::kElems / 4;
  constexpr int kRunsPerGroup = kRuns / D::kGroups;
  __shared__ uint4 stage[kEmbThreads + 1];  // +1: load_u32_any reads up to 4 bytes past the data

  const int64_t token = blockIdx.x;
  const int64_t blk0 = static_cast<int64_t>(blockIdx.y) * kBlocksPerSeg;
  const int n_blocks = static_cast<int>(min(static_cast<int64_t>(kBlocksPerSeg), a.blocks_per_row - blk0));
  float* out = a.out + token * a.ld_out + blk0 * D::kBlockElems;
  const int32_t id = a.ids[token];
  if (id < 0 || id >= a.n_rows_w) {  // uniform over the block: no barrier is skipped by only some threads
    for (int e = threadIdx.x; e < n_blocks * D::kBlockElems; e += kEmbThreads) out[e] = NAN;
    return;
  }
  const uint8_t* first = a.w + id * a.row_stride + blk0 * D::kBlockBytes;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(first) & ~uintptr_t{15});
  const int shift = static_cast<int>(first - base);
  const int n_chunks = (shift + n_blocks * D::kBlockBytes + 15) / 16;
  if (static_cast<int>(threadIdx.x) < n_chunks) stage[threadIdx.x] = load_chunk_16(base + 16 * threadIdx.x, a.w_end);
  __syncthreads();

  const uint8_t* staged = reinterpret_cast<const uint8_t*>(stage) + shift;
  for (int unit = threadIdx.x; unit < n_blocks * D::kLanesPerBlock; unit += kEmbThreads) {
    const int blk = unit / D::kLanesPerBlock;
    const int part = unit % D::kLanesPerBlock;
    float q[D::kElems];
    float scale[D::kGroups];
    float min_v[D::kGroups];
    D::decode(staged + blk * D::kBlockBytes, part, q, scale, min_v);
    float* out_blk = out + blk * D::kBlockElems;
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
      const int g = r / kRunsPerGroup;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float v = q[4 * r + k];
        if constexpr (!D::kUnitScale) v = __fmul_rn(scale[g], v);
        if constexpr (D::kHasMin) v = __fadd_rn(v, min_v[g]);
        out_blk[D::run_offset(part, r) + k] = v;
      }
    }
  }
}

}  // namespace
}  // namespace detail

const char* embedding_unsupported_reason(const EmbeddingParams& p) {
  const int block = detail::decoder_block_elems(p.type);
  if (block == 0) return "weight type not supported by the CUDA embedding gather";
  if (p.w == nullptr || p.ids == nullptr || p.out == nullptr) return "w, ids and out must be device pointers";
  if (p.n_rows_w <= 0 || p.n_cols <= 0 || p.n_ids < 0) return "sizes must be positive";
  if (p.n_cols % block != 0) return "n_cols must be a multiple of the weight type's block size";
  if (p.n_ids > 0x7fffffff) return "more than 2^31 ids";
  if (static_cast<uint64_t>(p.row_stride) < row_bytes(p.type, static_cast<uint64_t>(p.n_cols))) {
    return "row_stride is smaller than one row";
  }
  if (p.ld_out < p.n_cols) return "ld_out < n_cols";
  if (reinterpret_cast<uintptr_t>(p.w) % 16 != 0) return "the weights must be 16-byte aligned";
  if (p.layout == WeightLayout::kSplitRows && !split_rows_supported(p.type, p.n_cols)) {
    return "split rows exist for Q4_0 and Q8_0 rows of whole 16-byte chunks only";
  }
  return nullptr;
}

cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (embedding_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_ids == 0) return cudaSuccess;
  if (p.layout == WeightLayout::kSplitRows) {
    return detail::split_rows_embedding(p.type, p.w, p.n_rows_w, p.n_cols, p.row_stride, p.ids, p.n_ids, p.out,
                                        p.ld_out, stream);
  }
  return detail::visit_decoder(p.type, [&](auto decoder) -> cudaError_t {
    using D = decltype(decoder);
    detail::EmbeddingArgs a;
    a.w = static_cast<const uint8_t*>(p.w);
    a.n_rows_w = p.n_rows_w;
    a.row_stride = p.row_stride;
    a.blocks_per_row = p.n_cols / D::kBlockElems;
    a.w_end = a.w + (p.n_rows_w - 1) * p.row_stride + a.blocks_per_row * D::kBlockBytes;
    a.ids = p.ids;
    a.out = p.out;
    a.ld_out = p.ld_out;
    constexpr int kPerSeg = detail::EmbGeometry<D>::kBlocksPerSeg;
    const int64_t n_seg = (a.blocks_per_row + kPerSeg - 1) / kPerSeg;
    if (n_seg > 65535) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(p.n_ids), static_cast<unsigned>(n_seg));
    detail::embedding_kernel<D><<<grid, detail::kEmbThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace ga::cuda
