// moe_grouped_gemm() (moe.h): the prefill's expert GEMMs in one launch, segment sizes read on the device.
//
// Design. After moe_gather_rows_f16 the tokens of expert e are rows [offsets[e], offsets[e] + counts[e]) of
// one f16 matrix (the plan's sorted order), so the work is one GEMM per expert, Y_e = X_e W_e^T, of sizes
// only the device knows. The kernel is a persistent grid over a tile list it derives itself: every CTA
// scans the plan's counts into the prefix of 64-row tiles per expert (warp 0, shared memory), then walks the
// flattened (row tile, column tile) index in steps of the grid, finds its expert by binary search of the
// prefix, and computes a 64 x 64 tile of Y: 4 warps of 32 x 32 each, tensor cores through WMMA
// (16 x 16 x 16 f16, float accumulators), K in steps of 32 staged in shared memory, the next step's
// 16-byte loads issued before the current step's MMAs. Rows past the segment are read as zeros and not
// stored. Nothing depends on the host: the launch is graph-capturable and the grid is fixed (a bound
// of the tiles any routing can give, capped at the resident CTAs).
// This is the simple first version (no wgmma, no TMA, no swizzled layout); cuBLAS on each expert
// (moe_prefill_host_sync) is the other path. The gate and up stacks run in one launch (blockIdx.z).
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kTileM = 64;     // tokens per tile
constexpr int kTileN = 64;     // outputs per tile
constexpr int kTileK = 32;     // reduction step
constexpr int kThreads = 128;  // 4 warps, 2 x 2 of 32 x 32
constexpr int kPadK = kTileK + 8;    // halves per staged row: 80 bytes keep WMMA's 32-byte alignment per 16 rows
constexpr int kPadN = kTileN + 4;    // floats per staged output row
constexpr int kChunks = kTileM * kTileK / 8 / kThreads;  // 16-byte chunks per thread and operand: 2

struct GroupedArgs {
  const int32_t* counts;   // plan
  const int32_t* offsets;
  int n_expert;
  const __half* w[2];      // stacks: [n_expert] x [n][ldw]
  int64_t ldw, expert_stride;
  int64_t n, k;
  const __half* x;         // [n_pairs][ldx], sorted order
  int64_t ldx;
  float* y;                // [n_pairs][ldy], sorted order; stack z writes columns [z n, (z + 1) n)
  int64_t ldy;
};

__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(const GroupedArgs a) {
  using namespace nvcuda;
  __shared__ int32_t tile_start[kMoeMaxExperts + 1];  // first row tile of each expert; [E] = all row tiles
  __shared__ __align__(32) __half sa[kTileM][kPadK];
  __shared__ __align__(32) __half sb[kTileN][kPadK];
  __shared__ __align__(32) float sc[kTileM][kPadN];
  pdl_wait_prior_grid();  // the plan and x are earlier kernels' outputs
  pdl_allow_dependents();
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  if (warp == 0) {  // exclusive scan of ceil(count / 64): lane l owns experts 8l .. 8l + 7
    constexpr int kPer = kMoeMaxExperts / 32;
    int t[kPer], sum = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      t[i] = e < a.n_expert ? (a.counts[e] + kTileM - 1) / kTileM : 0;
      sum += t[i];
    }
    int pre = sum;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, pre, off);
      if (lane >= off) pre += o;
    }
    int at = pre - sum;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < a.n_expert) tile_start[e] = at;
      at += t[i];
    }
    if (lane == 31) tile_start[a.n_expert] = pre;
  }
  __syncthreads();
  const int tiles_n = static_cast<int>(a.n / kTileN);
  const int64_t total = static_cast<int64_t>(tile_start[a.n_expert]) * tiles_n;
  const __half* const w_stack = blockIdx.y == 0 ? a.w[0] : a.w[1];  // (no dynamic index: a stays in the param space)
  float* const y_stack = a.y + blockIdx.y * a.n;
  const int wm = warp >> 1, wn = warp & 1;

  for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int mt_all = static_cast<int>(tile / tiles_n);
    const int nt = static_cast<int>(tile - static_cast<int64_t>(mt_all) * tiles_n);
    int lo = 0, hi = a.n_expert - 1;  // the expert with tile_start[e] <= mt_all < tile_start[e + 1]
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (tile_start[mid] <= mt_all) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int e = lo;
    const int mt = mt_all - tile_start[e];
    const int64_t row0 = a.offsets[e] + static_cast<int64_t>(mt) * kTileM;  // sorted position of the tile's row 0
    const int rows = min(kTileM, a.counts[e] - mt * kTileM);
    const __half* const xa = a.x + row0 * a.ldx;
    const __half* const wb = w_stack + e * a.expert_stride + static_cast<int64_t>(nt) * kTileN * a.ldw;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    }
    uint4 ra[kChunks], rb[kChunks];
    auto load = [&](int64_t k0) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int idx = tid + c * kThreads;
        const int r = idx >> 2, q = idx & 3;  // 4 chunks of 8 halves per row of 32
        ra[c] = r < rows ? *reinterpret_cast<const uint4*>(xa + r * a.ldx + k0 + 8 * q) : make_uint4(0, 0, 0, 0);
        rb[c] = *reinterpret_cast<const uint4*>(wb + r * a.ldw + k0 + 8 * q);
      }
    };
    load(0);
    for (int64_t k0 = 0; k0 < a.k; k0 += kTileK) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int idx = tid + c * kThreads;
        *reinterpret_cast<uint4*>(&sa[idx >> 2][8 * (idx & 3)]) = ra[c];
        *reinterpret_cast<uint4*>(&sb[idx >> 2][8 * (idx & 3)]) = rb[c];
      }
      __syncthreads();
      if (k0 + kTileK < a.k) load(k0 + kTileK);  // in flight during the MMAs below
#pragma unroll
      for (int kk = 0; kk < kTileK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];  // sb[n][k]: K x N column-major
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &sa[wm * 32 + i * 16][kk], kPadK);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &sb[wn * 32 + j * 16][kk], kPadK);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
      }
      __syncthreads();  // the stage is rewritten by the next step
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(&sc[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kPadN, wmma::mem_row_major);
      }
    }
    __syncthreads();
    for (int idx = tid; idx < kTileM * kTileN / 4; idx += kThreads) {
      const int r = idx / (kTileN / 4), c = 4 * (idx % (kTileN / 4));
      if (r < rows) {
        const float4 v = make_float4(sc[r][c], sc[r][c + 1], sc[r][c + 2], sc[r][c + 3]);
        *reinterpret_cast<float4*>(y_stack + (row0 + r) * a.ldy + static_cast<int64_t>(nt) * kTileN + c) = v;
      }
    }
    __syncthreads();  // sc is rewritten by the next tile
  }
}

bool misaligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

}  // namespace
}  // namespace detail

const char* moe_grouped_gemm_unsupported_reason(const MoeGroupedGemmParams& p) {
  if (const char* why = moe_shape_unsupported_reason(p.shape)) return why;
  if (p.plan == nullptr || p.w == nullptr || p.x == nullptr || p.y == nullptr) return "plan, w, x and y must be set";
  if (p.n <= 0 || p.n % detail::kTileN != 0) return "n must be a positive multiple of 64 (the tile)";
  if (p.k <= 0 || p.k % detail::kTileK != 0) return "k must be a positive multiple of 32 (the reduction step)";
  if (p.ldw < p.k || p.ldw % 8 != 0 || p.ldx < p.k || p.ldx % 8 != 0) {
    return "ldw and ldx must be >= k and multiples of 8 (16-byte rows of halves)";
  }
  if (p.expert_stride < p.n * p.ldw || p.expert_stride % 8 != 0) return "expert_stride must hold an expert, a multiple of 8";
  if (p.ldy < (p.w2 != nullptr ? 2 : 1) * p.n || p.ldy % 4 != 0) return "ldy must be >= n (2 n with w2) and a multiple of 4";
  if (detail::misaligned(p.w) || detail::misaligned(p.w2) || detail::misaligned(p.x) || detail::misaligned(p.y)) {
    return "w, w2, x and y must be 16-byte aligned";
  }
  return nullptr;
}

cudaError_t moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  if (moe_grouped_gemm_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.shape.n_pairs() == 0) return cudaSuccess;
  const MoePlanView plan = moe_plan_view(p.shape, const_cast<void*>(p.plan));
  detail::GroupedArgs a;
  a.counts = plan.counts;
  a.offsets = plan.offsets;
  a.n_expert = p.shape.n_expert;
  a.w[0] = static_cast<const __half*>(p.w);
  a.w[1] = static_cast<const __half*>(p.w2 != nullptr ? p.w2 : p.w);
  a.ldw = p.ldw;
  a.expert_stride = p.expert_stride;
  a.n = p.n;
  a.k = p.k;
  a.x = static_cast<const __half*>(p.x);
  a.ldx = p.ldx;
  a.y = p.y;
  a.ldy = p.ldy;
  // tiles of any routing: sum over experts of ceil(c_e / 64) <= n_pairs / 64 + used experts
  const int64_t used = p.shape.n_pairs() < p.shape.n_expert ? p.shape.n_pairs() : p.shape.n_expert;
  const int64_t bound = (p.shape.n_pairs() / detail::kTileM + used) * (p.n / detail::kTileN);
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if ((status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return status;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, detail::grouped_gemm_kernel, detail::kThreads, 0);
  if (status != cudaSuccess) return status;
  const int64_t resident = int64_t{sms} * (per_sm < 1 ? 1 : per_sm);
  const int64_t grid = bound < resident ? bound : resident;
  return detail::launch_after_prior(detail::grouped_gemm_kernel,
                                    dim3(static_cast<unsigned>(grid), p.w2 != nullptr ? 2u : 1u), dim3(detail::kThreads),
                                    0, stream, a);
}

}  // namespace ga::cuda
