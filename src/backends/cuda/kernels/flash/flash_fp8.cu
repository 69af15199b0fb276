// Host side of the FP8 (e4m3) Hopper forward (flash_attention.h), called by flash_forward.cu once the
// parameters, the device and the variant have been checked: a V^T pre-pass into the workspace, the three
// 8-bit TMA maps, and the attention kernel (flash_fwd_sm90.cuh with ElemKind::kE4m3).
//
// Why a V^T pre-pass: 8-bit wgmma reads both operands K-major, and in O += P V the reduction runs over keys,
// so B must be [head_dim][keys] with keys contiguous. FA3 transposes V tiles in shared memory inside the
// kernel (ldmatrix/stmatrix by the producer warps); the defaults transpose V once in global memory instead
// (memory-bound: 2 * bytes(V), 3-4% of the attention time at 4k keys, ~1% at 16k), which keeps the kernel's
// producer a single TMA thread. The in-kernel transpose exists as benchmark variants 57 / 58
// (kSchedFp8VtInKernel, flash_fp8_vt.cuh): measured 0.69-0.95x of the defaults from 4k keys on (the
// transposing warps' instructions compete with the issue-bound consumers), so the pre-pass stays. The same pass
// stores each 16-key group's columns in the order fp8_key_of_column gives, so the consumers need no register
// shuffle to turn S into the 8-bit A operand (flash_fwd_sm90.cuh), and zero-fills keys past seqlen_k up to the
// 16-key padding (masked P is 0, and 0 * garbage could be NaN).
//
// Workspace V^T: [batch][n_head_kv][head_dim][seq_pad] bytes, seq_pad = round_up(seqlen_k, 16) (the TMA row
// stride must be a multiple of 16 bytes); keys past seq_pad arrive from TMA as zeros. Then 16 bytes: the int
// tile counter of the persistent kernels' dynamic scheduler (flash_fwd_sm90.cuh), zeroed by the pre-pass.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/flash/flash_common.h"
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"
#include "backends/cuda/kernels/tile/tma_map.h"

namespace ga::cuda::flash_detail {
namespace {

constexpr int kVtKeys = 64;  // keys per CTA of the transpose

int64_t seq_pad(int seqlen_k) { return (int64_t{seqlen_k} + 15) / 16 * 16; }

size_t vt_bytes(const FlashParams& p) {
  return static_cast<size_t>(p.batch) * static_cast<size_t>(p.n_head_kv) * static_cast<size_t>(p.head_dim) *
         static_cast<size_t>(seq_pad(p.seqlen_k));
}

// The persistent kernels' tile counter: 16 bytes after V^T (whose size is a multiple of 16).
int* tile_counter_of(const FlashParams& p, uint8_t* workspace) {
  return reinterpret_cast<int*>(workspace + vt_bytes(p));
}

// One CTA: 64 keys x HD of one (kv head, batch), HD threads. V rows come in as 16-byte vectors into a shared
// tile (all loads in flight before the barrier) whose 16-byte chunks are XOR-swizzled by key group (chunk_slot),
// so the 32-bit column reads below hit 32 different banks. Thread (dc, g) then owns head-dim rows 4dc..4dc+3 of
// 16-key group g: it reads the 4 bytes (4dc..4dc+3) of each of the group's 16 keys as one 32-bit word, transposes
// 4 x 4 byte blocks with byte permutes, and writes one 16-byte vector per row; g is the fastest thread index, so
// the 4 groups of a row (64 contiguous bytes, two full sectors) go out in one store instruction. (Version 1 read
// single bytes, 64 loads per 16 bytes out: 30 us for the FA3 methodology's 67 MB at every length. Version 2 had
// each thread write 2 groups of 4 rows, so one store instruction covered 32 rows x 16 bytes, half sectors: 39 us.)
// grid (ceil(seq_pad / 64), n_head_kv, batch).
template <int HD>
__global__ void __launch_bounds__(HD) fp8_transpose_v_kernel(const uint8_t* __restrict__ v, int64_t v_batch_stride,
                                                             int64_t v_seq_stride, int64_t v_head_stride,
                                                             uint8_t* __restrict__ vt, int seqlen_k, int64_t pad,
                                                             int n_head_kv, int* tile_counter) {
  constexpr int kThreads = HD;
  constexpr int kRow = HD;  // tile row (bytes)
  __shared__ __align__(16) uint8_t rows[kVtKeys * kRow];
  // Where 16-byte chunk ch of key r lies in its row: a warp's column reads (lanes = 4 groups x 8 consecutive
  // 4-byte columns) then spread over chunks (ch ^ 2g), i.e. 8 distinct chunks = 32 banks. HD >= 128: 8+ chunks.
  auto chunk_slot = [](int r, int ch) { return ch ^ (2 * ((r / 16) & 3)); };
  const int key0 = static_cast<int>(blockIdx.x) * kVtKeys;
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x);
  if (blockIdx.x == 0 && head == 0 && batch == 0 && tid == 0) *tile_counter = 0;  // the attention kernel's scheduler
  const uint8_t* src = v + batch * v_batch_stride + head * v_head_stride;
  constexpr int kChunksPerRow = HD / 16;
  constexpr int kLoads = kVtKeys * kChunksPerRow / kThreads;  // 4
  uint4 val[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int i = tid + u * kThreads, r = i / kChunksPerRow, ch = i % kChunksPerRow, key = key0 + r;
    val[u] = key < seqlen_k ? *reinterpret_cast<const uint4*>(src + key * v_seq_stride + ch * 16)
                            : make_uint4(0u, 0u, 0u, 0u);  // keys past seqlen_k: zeros (masked P is 0)
  }
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int i = tid + u * kThreads, r = i / kChunksPerRow, ch = i % kChunksPerRow;
    *reinterpret_cast<uint4*>(rows + r * kRow + chunk_slot(r, ch) * 16) = val[u];
  }
  __syncthreads();
  const int g = tid % 4, d0 = 4 * (tid / 4);  // 16-key group g, head-dim rows d0..d0+3
  const int64_t col = key0 + 16 * g;
  if (col >= pad) return;  // pad is a multiple of 16
  uint32_t out[4][4];  // [d - d0][word q = columns 4q..4q+3 of the group]
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t w[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // column 4q + b holds key fp8_key_of_column(4q + b) of the group
      const int r = 16 * g + fp8_key_of_column(4 * q + b);
      // bytes d0..d0+3 of key r
      w[b] = *reinterpret_cast<const uint32_t*>(rows + r * kRow + chunk_slot(r, d0 / 16) * 16 + d0 % 16);
    }
    // 4 x 4 byte transpose: out[j][q] byte b = byte j of w[b].
    const uint32_t t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t t2 = __byte_perm(w[2], w[3], 0x5140), t3 = __byte_perm(w[2], w[3], 0x7362);
    out[0][q] = __byte_perm(t0, t2, 0x5410);
    out[1][q] = __byte_perm(t0, t2, 0x7632);
    out[2][q] = __byte_perm(t1, t3, 0x5410);
    out[3][q] = __byte_perm(t1, t3, 0x7632);
  }
  uint8_t* dst = vt + ((int64_t{batch} * n_head_kv + head) * HD + d0) * pad + col;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    *reinterpret_cast<uint4*>(dst + int64_t{j} * pad) = make_uint4(out[j][0], out[j][1], out[j][2], out[j][3]);
  }
}

template <int HD>
cudaError_t launch_transpose_v(const FlashParams& p, uint8_t* vt, cudaStream_t stream) {
  const int64_t pad = seq_pad(p.seqlen_k);
  const dim3 tgrid(static_cast<unsigned>((pad + kVtKeys - 1) / kVtKeys), static_cast<unsigned>(p.n_head_kv),
                   static_cast<unsigned>(p.batch));
  fp8_transpose_v_kernel<HD><<<tgrid, HD, 0, stream>>>(static_cast<const uint8_t*>(p.v), p.v_batch_stride,
                                                        p.v_seq_stride, p.v_head_stride, vt, p.seqlen_k, pad,
                                                        p.n_head_kv, tile_counter_of(p, vt));
  return cudaGetLastError();
}

template <int HD>
cudaError_t run_fp8(const FlashParams& p, int variant, uint8_t* vt, int num_sms, cudaStream_t stream) {
  const int64_t pad = seq_pad(p.seqlen_k);
  FwdArgs a{};
  const uint64_t vt_dims[4] = {static_cast<uint64_t>(pad), HD, static_cast<uint64_t>(p.n_head_kv),
                               static_cast<uint64_t>(p.batch)};
  const uint64_t vt_strides[3] = {static_cast<uint64_t>(pad), static_cast<uint64_t>(HD * pad),
                                  static_cast<uint64_t>(p.n_head_kv) * HD * static_cast<uint64_t>(pad)};
  // One V^T column block: HD rows of 128 keys (a tile of more keys is several boxes: FwdTraits::kVtBlocks).
  const uint32_t vt_box[4] = {128, HD, 1, 1};
  const uint32_t k_box = static_cast<uint32_t>(fp8_variant_block_n<HD>(variant));  // K rows per tile
  const int block_m = fp8_variant_block_m<HD>(variant);                             // Q rows per tile
  // The in-kernel V^T variants load V tiles as they are stored, with K's kind of map (the workspace then only holds
  // the tile counter); the others read V^T.
  const bool vt_in_kernel = fp8_vt_in_kernel_variant(variant);
  if (tile::encode_tma_map_bshd(&a.tm_q, 1, false, p.q, HD, p.seqlen_q, p.n_head, p.batch, p.q_seq_stride,
                                p.q_head_stride, p.q_batch_stride, static_cast<uint32_t>(block_m)) != nullptr ||
      tile::encode_tma_map_bshd(&a.tm_k, 1, false, p.k, HD, p.seqlen_k, p.n_head_kv, p.batch, p.k_seq_stride,
                                p.k_head_stride, p.k_batch_stride, k_box) != nullptr ||
      (vt_in_kernel ? tile::encode_tma_map_bshd(&a.tm_v, 1, false, p.v, HD, p.seqlen_k, p.n_head_kv, p.batch,
                                                p.v_seq_stride, p.v_head_stride, p.v_batch_stride, k_box)
                    : tile::encode_tma_map_8bit_sw128(&a.tm_v, vt, vt_dims, vt_strides, vt_box)) != nullptr) {
    return cudaErrorInvalidValue;
  }
  if (vt_in_kernel) {  // no pre-pass to zero the tile counter
    if (const cudaError_t e = cudaMemsetAsync(tile_counter_of(p, vt), 0, sizeof(int), stream); e != cudaSuccess) {
      return e;
    }
  } else if (const cudaError_t e = launch_transpose_v<HD>(p, vt, stream); e != cudaSuccess) {
    return e;
  }
  set_fwd_problem(a, p, block_m);
  set_fwd_scales(a, p, p.softmax_scale * p.descale_q * p.descale_k);  // S in real units = raw Q K^T * descales
  a.o_scale = p.descale_v;
  a.out_bf16 = p.out_dtype == FlashDtype::kBf16 ? 1 : 0;
  a.tile_counter = tile_counter_of(p, vt);  // zeroed above (same stream, before this launch)
  return launch_fwd_fp8<HD>(a, variant, num_sms, stream);
}

}  // namespace

cudaError_t fp8_transpose_v(const FlashParams& p, void* workspace, cudaStream_t stream) {
  uint8_t* vt = static_cast<uint8_t*>(workspace);
  switch (p.head_dim) {
    case 128: return launch_transpose_v<128>(p, vt, stream);
    case 256: return launch_transpose_v<256>(p, vt, stream);
    default: return cudaErrorInvalidValue;
  }
}

size_t fp8_workspace_bytes(const FlashParams& p) { return vt_bytes(p) + 16; }

cudaError_t forward_fp8(const FlashParams& p, int variant, void* workspace, size_t /*workspace_bytes*/, int num_sms,
                        cudaStream_t stream) {
  uint8_t* vt = static_cast<uint8_t*>(workspace);
  switch (p.head_dim) {
    case 128: return run_fp8<128>(p, variant, vt, num_sms, stream);
    case 256: return run_fp8<256>(p, variant, vt, num_sms, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ga::cuda::flash_detail
