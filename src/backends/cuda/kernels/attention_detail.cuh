// The building blocks shared by the decode and prefill attention kernels (attention_decode.cu,
// attention_prefill.cu): the PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 and the sm_75 m16n8k8 the Turing
// flash forward uses), the staging of a
// K/V tile into shared memory, and the per-warp step of flash attention on one tile.
//
// Why one warp step for both paths: both kernels are "16 query rows of one warp against a run of
// keys in shared memory, with an online softmax"; they differ only in how a CTA divides work among
// its warps (prefill: each warp owns 16 rows and walks every key; decode: the warps share 16 rows
// and split each tile's keys, then merge). A query "row" is one (token, query head) pair of a GQA
// group: rows r = t * G + g for G = n_head / n_head_kv, so one K/V tile in shared memory serves every
// query head of its KV head (each KV byte is read once per KV head, not once per query head).
//
// Numerics: q is converted to f16 when its fragments are built, pre-multiplied by scale * log2(e) so
// the softmax runs on exp2; scores, the running max/sum and the output accumulators are f32; the
// probabilities are rounded to f16 for the P V product (the FlashAttention-2 recipe). Masked scores
// are replaced (never added) by -inf, and K/V rows past the valid range are zero-filled, so a NaN or
// garbage beyond the cache's valid length can never reach the output.
//
// Sliding windows (AttentionParams::window_left) and soft-capping: the kernels skip the key tiles below
// every row's window (their ranges start at the window), so the step only masks the tiles that straddle a
// row's lower bound; with soft-capping q is pre-scaled by 2 log2(e) scale / c instead of scale log2(e), and
// the step turns each score into c log2(e) tanh(scale q.k / c) (attention_softcap.cuh) before the mask.
// Both are uniform branches around the masking and the softmax, so the off path runs the same loop.
//
// The FP8 KV cache (AttentionParams::kv_dtype kFp8; the KvPipeline's kFp8 form): tiles of E4M3 codes and their
// per-(position, KV head) float scales are staged with cp.async exactly as f16 tiles are (half the bytes per key),
// and before a tile is used its keys are dequantized into f16 tiles of the same [64][HD + 8] layout,
// half(e4m3(code) * scale) with the product in f32 (a scale can be far below f16's normal range; the product is the
// cached value, in range as an F16 cache's is): the flash step then runs unchanged. The decode kernel's warps each
// dequantize their own 16 keys (no barrier), the prefill kernel's threads the whole tile (one barrier more).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/attention_softcap.cuh"

namespace ga::cuda::detail {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr int kAttnWarps = 4;                 // warps per CTA for both kernels
inline constexpr int kAttnThreads = kAttnWarps * 32;
inline constexpr int kAttnTileKeys = 64;             // keys per shared-memory stage
inline constexpr int kAttnStages = 2;                // cp.async double buffering
inline constexpr int kMmaRows = 16;                  // query rows per warp (the mma M)

// Halves between two keys of a shared-memory tile: one row of head_dim plus 16 bytes, so the eight
// row addresses of an ldmatrix land in eight different bank groups.
template <int HD>
__host__ __device__ constexpr int smem_row_halves() { return HD + 8; }

// Dynamic shared memory of one CTA: K and V stages (the decode merge reuses it, and fits).
template <int HD, int kStages = kAttnStages>
constexpr size_t attn_smem_bytes() {
  return size_t{2} * kStages * kAttnTileKeys * smem_row_halves<HD>() * sizeof(__half);
}

// What the kernels receive: validated AttentionParams with the group size spelled out.
struct AttnArgs {
  const float* q;
  int64_t q_stride;
  const __half* k;
  const __half* v;
  int64_t kv_stride;       // elements (halves, or FP8 codes) between cache positions
  // FP8 cache (the kFp8 kernels): codes [positions][n_head_kv][HD], kv_stride codes apart; scales
  // [positions][n_head_kv], scale_stride floats apart.
  const uint8_t* k8;
  const uint8_t* v8;
  const float* k_scale;
  const float* v_scale;
  int64_t scale_stride;
  float* out;
  int64_t out_stride;
  int n_tokens, n_head, n_head_kv, group;  // group = n_head / n_head_kv
  int64_t pos0;
  const int32_t* pos0_device;
  int64_t max_kv;       // cache capacity (>= n_tokens): a device pos0 is clamped so reads stay inside
  float q_scale;        // scale * log2(e); with soft-capping 2 * log2(e) * scale / softcap (attention_softcap.cuh)
  float softcap_log2;   // softcap * log2(e), or 0: no soft-capping
  int window_left;      // -1, or the sliding window: query position i sees positions >= i - window_left
  int n_splits;         // decode only: CTAs along the KV range per (KV head, row tile)
  float* ws_o;          // decode, n_splits > 1: [n_splits][n_tokens * n_head][head_dim]
  float* ws_ml;         // decode, n_splits > 1: [n_splits][n_tokens * n_head][2] (max in log2 units, sum)
  unsigned* done;       // decode, n_splits > 1: [seqs][n_head_kv][done_stride] CTAs finished per (KV head, row tile)
  int done_stride;
  // Paged form (the kPaged kernels; attention.h): runs of query tokens over block tables.
  int n_seqs;
  const int32_t* seq_q_start;   // [n_seqs + 1]
  const int32_t* seq_pos0;      // [n_seqs]
  const int32_t* block_table;   // [n_seqs][block_table_stride]
  int64_t block_table_stride;
  int block_size;
  int n_kv_blocks_max;          // n_kv_blocks - 1: the clamp of a block id
  int max_seq_tokens;
  int seq_row_tiles;            // decode: row tiles of 16 per sequence (grid z = n_seqs * seq_row_tiles)
  int ws_q_per_seq;             // decode: workspace rows of run s start at s * ws_q_per_seq (tokens)
  int64_t ws_rows_total;        // decode: workspace rows per split (n_head per token)
  int prefill_min_q;            // prefill: runs of <= this many tokens belong to the decode launch
  int decode_stages;            // decode: cp.async stages of the decode kernel (2, or 3: attention_impl.cuh)
  int cluster_merge;            // decode, paged, sm_90: the n_splits CTAs of a column are one cluster (DSMEM merge)
  unsigned long long* trace;    // decode, paged, benchmarks: [CTAs][8] timestamps (AttentionParams::decode_trace)
};

// One run of query tokens of the paged form (or the single sequence of the contiguous form): tokens
// [tok0, tok0 + n_q) of q/out at positions pos0 .. pos0 + n_q - 1, over block table `table`.
struct SeqRun {
  int64_t tok0;
  int n_q;
  int64_t pos0;
  const int32_t* table;
};

// Run s with the clamps of attention.h: bounds inside [0, n_tokens], pos0 inside [0, max_kv - n_q];
// n_q = 0 for a run longer than max_seq_tokens (skipped: the grids are sized for that bound).
__device__ __forceinline__ SeqRun paged_run(const AttnArgs& a, int s) {
  const int q_begin = min(max(__ldg(a.seq_q_start + s), 0), a.n_tokens);
  const int q_end = min(max(__ldg(a.seq_q_start + s + 1), q_begin), a.n_tokens);
  SeqRun run;
  run.tok0 = q_begin;
  run.n_q = q_end - q_begin > a.max_seq_tokens ? 0 : q_end - q_begin;
  const int64_t p = __ldg(a.seq_pos0 + s);
  run.pos0 = p < 0 ? 0 : (p > a.max_kv - run.n_q ? a.max_kv - run.n_q : p);
  run.table = a.block_table + int64_t{s} * a.block_table_stride;
  return run;
}

// The position of query token 0. A device pos0 cannot be validated on the host (the graph replays
// it), so it is clamped to [0, max_kv - n_tokens]: a bad value gives a wrong answer, never a fault.
__device__ __forceinline__ int64_t attn_pos0(const AttnArgs& a) {
  if (a.pos0_device == nullptr) return a.pos0;
  const int64_t p = *a.pos0_device;
  return p < 0 ? 0 : (p > a.max_kv - a.n_tokens ? a.max_kv - a.n_tokens : p);
}

// ---- PTX wrappers (sm_80+, except ldmatrix and mma_1688: sm_75+) ----
//
// cp.async and mma.sync m16n8k16 exist from sm_80 on. The default arch list also builds sm_75
// (Turing), where these kernels must still compile: there the wrappers trap, and the host side
// (attention_unsupported_reason) refuses devices below compute capability 8.0, so the forward pass
// takes its portable fallback attention instead and the traps are never reached.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define GA_ATTN_SM80 1
#else
#define GA_ATTN_SM80 0
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes 0 writes zeros (used for rows past the valid range).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
#if GA_ATTN_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
#else
  (void)dst, (void)src, (void)src_bytes;
  __trap();
#endif
}
// 4-byte copy (the FP8 cache's scales), zero-filled as cp_async_16.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
#if GA_ATTN_SM80
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
#else
  (void)dst, (void)src, (void)src_bytes;
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if GA_ATTN_SM80
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if GA_ATTN_SM80
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ---- thread-block clusters (sm_90): the decode's split merge in distributed shared memory ----
// Compiled to a trap below sm_90; the host selects the cluster merge only for a kernel binary built for
// sm_90 or newer on such a device (attention_decode.cu), so the trap is never reached.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GA_ATTN_SM90 1
#else
#define GA_ATTN_SM90 0
#endif

// Every thread of every CTA of the cluster: shared-memory writes before it are visible to the
// cluster's reads after it (release / acquire).
__device__ __forceinline__ void cluster_barrier() {
#if GA_ATTN_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// The shared::cluster address of `p` (this CTA's shared memory) in the CTA of cluster rank `rank`.
__device__ __forceinline__ uint32_t cluster_peer_addr(const void* p, unsigned rank) {
  uint32_t out = 0;
#if GA_ATTN_SM90
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(smem_addr(p)), "r"(rank));
#else
  (void)p, (void)rank;
  __trap();
#endif
  return out;
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t addr) {
  float v = 0.0f;
#if GA_ATTN_SM90
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
#else
  (void)addr;
  __trap();
#endif
  return v;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
#if GA_ATTN_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

// Nanoseconds of the GPU's global timer (coarse: the benchmark's decode trace, not timing of short spans).
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d[16x8] += a[16x16] * b[16x8], f32 accumulators; f16 inputs (kBf16 = false: the engine's kernels) or bf16
// (the flash kernels' bf16 instantiations). One asm template for both: only the type names differ.
#define GA_MMA_M16N8K16(TYPE)                                                                              \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                               \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <bool kBf16 = false>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if GA_ATTN_SM80
  if constexpr (kBf16) {
    GA_MMA_M16N8K16("bf16");
  } else {
    GA_MMA_M16N8K16("f16");
  }
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();
#endif
}
#undef GA_MMA_M16N8K16

// d[16x8] += a[16x8] * b[8x8], f16 inputs, f32 accumulators: the Turing (sm_75) tensor-core shape, half the k of
// m16n8k16 (a0: row g, a1: row g + 8, k 2c..2c+1; b0: k 2c..2c+1 of column g). The sm_75 flash forward issues two
// of these per m16n8k16 step (flash_mma_sm80.cuh). Compiled for every arch of the list (sm_75 included).
__device__ __forceinline__ void mma_1688(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// ---- staging ----

// Copies the kAttnTileKeys keys of one KV head's tile into shared memory ([kAttnTileKeys][smem_row_halves] for K,
// then the same for V): key i of the tile is cache row row_of(i) (rows kv_stride elements apart), or zeros when
// row_of(i) < 0. All kAttnThreads threads take part; the caller commits the group. The contiguous and paged forms
// below differ only in row_of.
template <int HD, class RowOf>
__device__ __forceinline__ void stage_kv_rows(__half* sk, __half* sv, const __half* k_head, const __half* v_head,
                                              int64_t kv_stride, RowOf row_of) {
  constexpr int kChunksPerKey = HD / 8;  // 16-byte chunks
  constexpr int kChunks = kAttnTileKeys * kChunksPerKey;
  static_assert(kChunks % kAttnThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < kChunks / kAttnThreads; ++i) {
    const int chunk = i * kAttnThreads + static_cast<int>(threadIdx.x);
    const int key = chunk / kChunksPerKey;
    const int col = (chunk % kChunksPerKey) * 8;
    const int64_t row = row_of(key);
    const int64_t offset = row >= 0 ? row * kv_stride + col : 0;  // a valid address even when zero-filling
    const int smem_off = key * smem_row_halves<HD>() + col;
    cp_async_16(sk + smem_off, k_head + offset, row >= 0 ? 16 : 0);
    cp_async_16(sv + smem_off, v_head + offset, row >= 0 ? 16 : 0);
  }
}

// Contiguous form: keys [tile_start, tile_start + kAttnTileKeys) are cache rows; keys at or past valid_end are zeros.
template <int HD>
__device__ __forceinline__ void stage_kv_tile(__half* sk, __half* sv, const __half* k_head, const __half* v_head,
                                              int64_t kv_stride, int64_t tile_start, int64_t valid_end) {
  stage_kv_rows<HD>(sk, sv, k_head, v_head, kv_stride,
                    [=](int key) { return tile_start + key < valid_end ? tile_start + key : int64_t{-1}; });
}

// The paged form's key -> slot map, one tile ahead of the copies (a block-table load on the copy
// path would add an L2 round trip to every tile): threads 0..63 each own one key of a tile; fetch()
// issues the table load for key tile_start + thread into a register, publish() turns it into the
// slot (-1 past valid_end: zero-filled) in a shared-memory row list [kAttnTileKeys] that
// stage_kv_tile_paged reads after the next barrier. Block ids are clamped to the pool.
struct PagedKeyMap {
  int32_t block;    // the fetched block id
  int32_t offset;   // position % block_size
  bool valid;

  __device__ __forceinline__ void fetch(int block_size, const int32_t* table, int64_t tile_start, int64_t valid_end) {
    const int64_t pos = tile_start + threadIdx.x;  // < max_kv_positions < 2^31 when valid
    valid = threadIdx.x < kAttnTileKeys && pos < valid_end;
    block = 0;
    offset = 0;
    if (valid) {
      const int b = static_cast<int>(pos) / block_size;
      offset = static_cast<int>(pos) - b * block_size;
      block = __ldg(table + b);
    }
  }
  __device__ __forceinline__ void publish(int block_size, int max_block, int32_t* rows) const {
    if (threadIdx.x < kAttnTileKeys) rows[threadIdx.x] = valid ? min(max(block, 0), max_block) * block_size + offset : -1;
  }
};

// Paged form, through a row list (PagedKeyMap): key i of the tile is cache row rows[i], or zeros when rows[i] < 0.
template <int HD>
__device__ __forceinline__ void stage_kv_tile_paged(__half* sk, __half* sv, const __half* k_head, const __half* v_head,
                                                    int64_t kv_stride, const int32_t* rows) {
  stage_kv_rows<HD>(sk, sv, k_head, v_head, kv_stride, [=](int key) { return int64_t{rows[key]}; });
}

// ---- the FP8 cache's staging and dequantization ----

// One stage of an FP8 tile in shared memory: K codes [kAttnTileKeys][fp8_row_bytes], V codes (same), K scales
// [kAttnTileKeys], V scales. A code row is padded by 16 bytes so the 16-byte reads of the dequantization spread
// over the banks as the f16 tiles' rows do.
template <int HD>
__host__ __device__ constexpr int fp8_row_bytes() { return HD + 16; }
template <int HD>
__host__ __device__ constexpr int fp8_stage_bytes() {
  return 2 * kAttnTileKeys * fp8_row_bytes<HD>() + 2 * kAttnTileKeys * static_cast<int>(sizeof(float));
}

// Copies one FP8 tile (codes and scales of K and V) for key i -> cache row row_of(i) (zeros when < 0), as
// stage_kv_rows. Codes move in 16-byte chunks; threads 0..63 copy the K scales, 64..127 the V scales.
template <int HD, class RowOf>
__device__ __forceinline__ void stage_kv_rows_fp8(unsigned char* stage, const uint8_t* k_head, const uint8_t* v_head,
                                                  int64_t kv_stride, const float* ks_head, const float* vs_head,
                                                  int64_t scale_stride, RowOf row_of) {
  constexpr int kChunksPerKey = HD / 16;
  constexpr int kChunks = kAttnTileKeys * kChunksPerKey;
  static_assert(kChunks % kAttnThreads == 0, "every thread copies the same number of chunks");
  static_assert(2 * kAttnTileKeys == kAttnThreads, "one thread per scale");
  unsigned char* const sk = stage;
  unsigned char* const sv = stage + kAttnTileKeys * fp8_row_bytes<HD>();
  float* const s_scales = reinterpret_cast<float*>(stage + 2 * kAttnTileKeys * fp8_row_bytes<HD>());  // [K | V]
#pragma unroll
  for (int i = 0; i < kChunks / kAttnThreads; ++i) {
    const int chunk = i * kAttnThreads + static_cast<int>(threadIdx.x);
    const int key = chunk / kChunksPerKey;
    const int col = (chunk % kChunksPerKey) * 16;
    const int64_t row = row_of(key);
    const int64_t offset = row >= 0 ? row * kv_stride + col : 0;
    const int smem_off = key * fp8_row_bytes<HD>() + col;
    cp_async_16(sk + smem_off, k_head + offset, row >= 0 ? 16 : 0);
    cp_async_16(sv + smem_off, v_head + offset, row >= 0 ? 16 : 0);
  }
  const int key = static_cast<int>(threadIdx.x) % kAttnTileKeys;
  const int64_t row = row_of(key);
  const float* const src = threadIdx.x < kAttnTileKeys ? ks_head : vs_head;
  cp_async_4(s_scales + threadIdx.x, src + (row >= 0 ? row * scale_stride : 0), row >= 0 ? 4 : 0);
}

// Dequantizes keys [key0, key0 + n_keys) of a staged FP8 tile into f16 K and V tiles ([kAttnTileKeys][HD + 8],
// the layout warp_flash_step reads): value = half(e4m3(code) * scale), the product in f32. Thread `t` of `n_threads`
// (a warp's lanes, or the CTA's threads) takes 16 codes at a time; zero-filled rows (code 0, scale 0) give zeros.
template <int HD>
__device__ __forceinline__ void dequantize_fp8_keys(const unsigned char* stage, __half* k_out, __half* v_out,
                                                    int key0, int n_keys, int t, int n_threads) {
  constexpr int kUnitsPerKey = HD / 16;
  const float* const s_scales = reinterpret_cast<const float*>(stage + 2 * kAttnTileKeys * fp8_row_bytes<HD>());
  const int units = n_keys * kUnitsPerKey;
  for (int u = t; u < 2 * units; u += n_threads) {  // K units, then V units
    const bool is_v = u >= units;
    const int w = is_v ? u - units : u;
    const int key = key0 + w / kUnitsPerKey;
    const int col = (w % kUnitsPerKey) * 16;
    const unsigned char* src = stage + (is_v ? kAttnTileKeys * fp8_row_bytes<HD>() : 0) + key * fp8_row_bytes<HD>() + col;
    const uint4 codes = *reinterpret_cast<const uint4*>(src);
    const float scale = s_scales[(is_v ? kAttnTileKeys : 0) + key];
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i / 2] >> (16 * (i % 2)));
      const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
      const float2 f = __half22float2(h);
      out[i] = pack_half2(f.x * scale, f.y * scale);
    }
    __half* dst = (is_v ? v_out : k_out) + key * smem_row_halves<HD>() + col;
    *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
    *reinterpret_cast<uint4*>(dst + 8) = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

// The K/V copy pipeline of one CTA over keys [first, valid_end) of one KV head, tile i holding keys
// first + i * kAttnTileKeys onwards, in kStages shared-memory stages (`smem`: [K stages][V stages] of
// [kAttnTileKeys][smem_row_halves]). The loop of a kernel reads
//   pipe.start(n_tiles);  (load q)  for i: { pipe.issue_next(i, n_tiles); __syncthreads(); compute
//   tile i from pipe.k_stage(i) / v_stage(i); pipe.map_ahead(i, n_tiles); __syncthreads(); }
// While tile i is computed, tiles i + 1 .. i + kStages - 1 are in flight: 2 stages (double
// buffering, 3 CTAs of hd 128 per SM) or 3 (2 CTAs per SM, the same bytes in flight per SM but each
// CTA's first tiles and its tail overlap more; the paged decode's variant, attention_impl.cuh).
// Contiguous form: key position = cache row. Paged form: rows through the block table; the slots of
// tile i + kStages are fetched while tile i is computed and published before the barrier that ends
// it, into one of two row lists (list j % 2 holds tile j: the list of tile i + kStages was last read
// when tile i + kStages - 2 was issued, an iteration or more earlier).
// kFp8: an FP8 cache; stage i holds codes and scales (fp8_stage_bytes) at raw_stage(i), for dequantize().
template <int HD, bool kPaged, int kStages = kAttnStages, bool kFp8 = false>
struct KvPipeline {
  static_assert(kStages == 2 || kStages == 3, "two row lists serve up to 3 stages");
  static constexpr int kTileHalves = kAttnTileKeys * smem_row_halves<HD>();
  __half* smem;
  const __half* k_head;
  const __half* v_head;
  const uint8_t* k8_head;  // kFp8 only
  const uint8_t* v8_head;
  const float* ks_head;
  const float* vs_head;
  int64_t scale_stride;
  int64_t kv_stride;
  int64_t first, valid_end;
  int block_size, max_block;     // paged only: positions per block, the largest valid block id
  const int32_t* table;          // paged only
  int32_t* rows;                 // paged only: shared [2][kAttnTileKeys]
  PagedKeyMap ahead;             // paged only: the map of tile i + kStages in flight

  __device__ __forceinline__ unsigned char* raw_stage(int i) const {
    return reinterpret_cast<unsigned char*>(smem) + (i % kStages) * fp8_stage_bytes<HD>();
  }
  // kFp8: keys [key0, key0 + n_keys) of tile i into f16 tiles (dequantize_fp8_keys).
  __device__ __forceinline__ void dequantize(int i, __half* k_out, __half* v_out, int key0, int n_keys, int t,
                                             int n_threads) const {
    dequantize_fp8_keys<HD>(raw_stage(i), k_out, v_out, key0, n_keys, t, n_threads);
  }
  __device__ __forceinline__ __half* k_stage(int i) const { return smem + (i % kStages) * kTileHalves; }
  __device__ __forceinline__ __half* v_stage(int i) const { return smem + (kStages + i % kStages) * kTileHalves; }
  __device__ __forceinline__ int64_t tile_start(int i) const { return first + int64_t{i} * kAttnTileKeys; }

  __device__ __forceinline__ void stage(int i) {
    if constexpr (kFp8) {
      if constexpr (kPaged) {
        const int32_t* const list = rows + (i % 2) * kAttnTileKeys;
        stage_kv_rows_fp8<HD>(raw_stage(i), k8_head, v8_head, kv_stride, ks_head, vs_head, scale_stride,
                              [=](int key) { return int64_t{list[key]}; });
      } else {
        const int64_t start = tile_start(i), end = valid_end;
        stage_kv_rows_fp8<HD>(raw_stage(i), k8_head, v8_head, kv_stride, ks_head, vs_head, scale_stride,
                              [=](int key) { return start + key < end ? start + key : int64_t{-1}; });
      }
    } else if constexpr (kPaged) {
      stage_kv_tile_paged<HD>(k_stage(i), v_stage(i), k_head, v_head, kv_stride, rows + (i % 2) * kAttnTileKeys);
    } else {
      stage_kv_tile<HD>(k_stage(i), v_stage(i), k_head, v_head, kv_stride, tile_start(i), valid_end);
    }
    cp_async_commit();
  }

  // The copies of tiles 0 .. kStages - 2 are issued in two phases, so that a paged decode CTA can do
  // the part that reads nothing the previous kernel writes before it waits for that kernel (PDL,
  // pdl.cuh): start_stable maps tiles 0..2 (paged: their table loads go out together, one round trip)
  // and issues the leading tiles whose keys all lie below stable_end; start_rest (after the wait)
  // issues the others, then maps tile 2 into list 0 (3 stages). Copies go out in tile order either way
  // (cp.async groups are counted in issue order). start() is both at once (stable_end 0: nothing early).
  // The start of a CTA is a chain of dependent round trips (run bounds -> table -> first tiles) that no
  // other work hides when every CTA of a one-wave grid starts at once: 4.6 us from the wait to the
  // first tile at b1 in the per-CTA timeline (bench_attention's decode_trace).
  __device__ __forceinline__ int start_stable(int n_tiles, int64_t stable_end) {
    int issued = 0;
    if constexpr (kPaged) {
      PagedKeyMap m0, m1;
      m0.fetch(block_size, table, tile_start(0), valid_end);
      m1.fetch(block_size, table, tile_start(1), valid_end);  // past valid_end when n_tiles == 1: all invalid
      if constexpr (kStages == 3) ahead.fetch(block_size, table, tile_start(2), valid_end);  // published in start_rest
      m0.publish(block_size, max_block, rows);
      m1.publish(block_size, max_block, rows + kAttnTileKeys);
      __syncthreads();
      if (tile_start(0) + kAttnTileKeys <= stable_end) {
        stage(0);
        issued = 1;
        if (kStages == 3 && n_tiles > 1 && tile_start(1) + kAttnTileKeys <= stable_end) {
          stage(1);
          issued = 2;
        }
      }
    }
    (void)n_tiles, (void)stable_end;
    return issued;
  }
  __device__ __forceinline__ void start_rest(int n_tiles, int issued) {
    if (issued < 1) stage(0);
    if constexpr (kStages == 3) {
      if (issued < 2) {
        if (n_tiles > 1) {
          stage(1);
        } else {
          cp_async_commit();  // an empty group: issue_next waits on group counts
        }
      }
      if constexpr (kPaged) {
        __syncthreads();  // every thread has read list 0 (tile 0's copies)
        ahead.publish(block_size, max_block, rows);  // tile 2's slots
        __syncthreads();  // issue_next(0) copies tile 2 through list 0
      }
    }
    (void)n_tiles;
  }
  __device__ __forceinline__ void start(int n_tiles) { start_rest(n_tiles, start_stable(n_tiles, 0)); }
  // Issues tile i + kStages - 1 and waits for tile i (the caller's barrier then publishes it); paged:
  // fetches the slots of tile i + kStages.
  __device__ __forceinline__ void issue_next(int i, int n_tiles) {
    if constexpr (kStages == 2) {
      if (i + 1 < n_tiles) {
        stage(i + 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      if (i + kStages - 1 < n_tiles) {
        stage(i + kStages - 1);
      } else {
        cp_async_commit();  // empty: keeps "tile i done" = all but the newest kStages - 1 groups
      }
      cp_async_wait<kStages - 1>();
    }
    if constexpr (kPaged) ahead.fetch(block_size, table, tile_start(i + kStages), valid_end);
  }
  __device__ __forceinline__ void map_ahead(int i, int n_tiles) {
    if constexpr (kPaged) {
      if (i + kStages < n_tiles) ahead.publish(block_size, max_block, rows + ((i + kStages) % 2) * kAttnTileKeys);
    }
  }
};

// ---- the per-warp flash-attention step ----

// A warp's running state for its 16 rows: thread (g = lane / 4, c = lane % 4) holds rows g and g + 8.
template <int HD>
struct WarpRows {
  float m[2];             // running max (log2 units), -inf before any visible key
  float l[2];             // this thread's share of the running sum (quad-reduced at the end)
  float acc[HD / 8][4];   // [dim tile][c0 c1 (row g, dims 2c, 2c+1) c2 c3 (row g + 8)]

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  }
};

// q fragments of one warp's 16 rows ([HD / 16] k-steps of the mma A operand), pre-scaled, f16.
// row_q[0 / 1]: the q row of rows g and g + 8, or null for padding rows (zeros).
template <int HD>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[HD / 16][4], const float* row_q0, const float* row_q1,
                                                 float q_scale) {
  const int c = threadIdx.x % 4;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // dims kk*16 + 2c (+8 for half 1)
      const int d = kk * 16 + half * 8 + 2 * c;
      const float2 x0 = row_q0 ? *reinterpret_cast<const float2*>(row_q0 + d) : make_float2(0.0f, 0.0f);
      const float2 x1 = row_q1 ? *reinterpret_cast<const float2*>(row_q1 + d) : make_float2(0.0f, 0.0f);
      qf[kk][half * 2 + 0] = pack_half2(x0.x * q_scale, x0.y * q_scale);
      qf[kk][half * 2 + 1] = pack_half2(x1.x * q_scale, x1.y * q_scale);
    }
  }
}

// The start both kernels share: the pipeline pointed at KV head kv_head's keys [first, valid_end) of the cache
// (a.k / a.v, rows a.kv_stride apart) with stages in `smem`, its first tiles' copies issued, then the warp's q
// fragments (their loads run while the copies are in flight) and a fresh softmax state. Paged pipelines have
// their block-table fields set by the caller first.
template <int HD, bool kPaged, int kStages, bool kFp8>
__device__ __forceinline__ void point_kv_pipeline(KvPipeline<HD, kPaged, kStages, kFp8>& pipe, __half* smem,
                                                  const AttnArgs& a, int kv_head, int64_t first, int64_t valid_end) {
  pipe.smem = smem;
  if constexpr (kFp8) {
    pipe.k8_head = a.k8 + int64_t{kv_head} * HD;
    pipe.v8_head = a.v8 + int64_t{kv_head} * HD;
    pipe.ks_head = a.k_scale + kv_head;
    pipe.vs_head = a.v_scale + kv_head;
    pipe.scale_stride = a.scale_stride;
  } else {
    pipe.k_head = a.k + int64_t{kv_head} * HD;
    pipe.v_head = a.v + int64_t{kv_head} * HD;
  }
  pipe.kv_stride = a.kv_stride;
  pipe.first = first;
  pipe.valid_end = valid_end;
}
template <int HD, bool kPaged, int kStages, bool kFp8>
__device__ __forceinline__ void start_kv_and_q(KvPipeline<HD, kPaged, kStages, kFp8>& pipe, __half* smem,
                                               const AttnArgs& a,
                                               int kv_head, int64_t first, int64_t valid_end, int n_tiles,
                                               const float* const (&q_row)[2], uint32_t (&qf)[HD / 16][4],
                                               WarpRows<HD>& st) {
  point_kv_pipeline(pipe, smem, a, kv_head, first, valid_end);
  pipe.start(n_tiles);
  load_q_fragments<HD>(qf, q_row[0], q_row[1], a.q_scale);
  st.init();
}

// Which keys a step may mask: a key at position j is visible to row g (g + 8) when lo[0] <= j <= lim[0]
// (lo[1], lim[1]). upper / lower: whether the step's keys reach past some row's lim / below some row's lo
// (uniform per warp; each false skips its masking loop). softcap_log2: AttnArgs::softcap_log2.
struct StepMask {
  int64_t lim[2];
  int lo[2];  // (positions are below 2^31: max_kv_positions is; 32 bits keep the decode's registers)
  bool upper, lower;
  float softcap_log2;
};

// One flash step: the warp's 16 rows against NK keys in shared memory (sk, sv point at the first
// key; rows of smem_row_halves<HD>). key0 is the position of the first key; mask says which keys each
// row sees and which masking loops run.
template <int HD, int NK>
__device__ __forceinline__ void warp_flash_step(WarpRows<HD>& st, const uint32_t (&qf)[HD / 16][4],
                                                const __half* sk, const __half* sv, int64_t key0,
                                                const StepMask& mask) {
  static_assert(NK % 16 == 0, "keys come in mma k-steps of 16");
  constexpr int kRow = smem_row_halves<HD>();
  const int lane = threadIdx.x % 32;
  const int c = lane % 4;

  // S = Q K^T: [16 rows][NK keys] as NK/8 accumulator tiles of 16x8.
  float s[NK / 8][4];
#pragma unroll
  for (int j = 0; j < NK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int j = 0; j < NK / 16; ++j) {
      // matrices: keys +0..7 / dims +0..7, keys +0..7 / dims +8..15, keys +8..15 / dims +0..7, +8..15 / +8..15
      const int key = j * 16 + (lane / 16) * 8 + (lane % 8);
      const int dim = kk * 16 + ((lane / 8) % 2) * 8;
      uint32_t b[4];
      ldmatrix_x4(b, sk + key * kRow + dim);
      mma_16816(s[2 * j], qf[kk], b[0], b[1]);
      mma_16816(s[2 * j + 1], qf[kk], b[2], b[3]);
    }
  }

  if (mask.softcap_log2 != 0.0f) {  // s = c log2(e) tanh(scale q.k / c): q carries 2 log2(e) scale / c
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = mask.softcap_log2 * softcap_tanh(s[j][e]);
    }
  }
  if (mask.upper) {
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t pos = key0 + j * 8 + 2 * c + (e & 1);
        if (pos > mask.lim[e / 2]) s[j][e] = -INFINITY;
      }
    }
  }
  if (mask.lower) {
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t pos = key0 + j * 8 + 2 * c + (e & 1);
        if (pos < mask.lo[e / 2]) s[j][e] = -INFINITY;
      }
    }
  }

  // Online softmax, per row: the quad (4 lanes with the same g) shares a row.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(st.m[r], tile_max);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a fully masked row stays at p = 0, no NaN
    const float correction = exp2f(st.m[r] - base);
    st.m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
      s[j][2 * r] = exp2f(s[j][2 * r] - base);
      s[j][2 * r + 1] = exp2f(s[j][2 * r + 1] - base);
      sum += s[j][2 * r] + s[j][2 * r + 1];
    }
    st.l[r] = st.l[r] * correction + sum;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      st.acc[j][2 * r] *= correction;
      st.acc[j][2 * r + 1] *= correction;
    }
  }

  // O += P V: P [16][NK] as the A operand (f16), V [NK][HD] through ldmatrix.trans.
#pragma unroll
  for (int kk = 0; kk < NK / 16; ++kk) {
    uint32_t a[4];
    a[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int jd = 0; jd < HD / 16; ++jd) {
      // matrices: keys +0..7 / dims +0..7, keys +8..15 / dims +0..7, keys +0..7 / dims +8..15, +8..15 / +8..15
      const int key = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8);
      const int dim = jd * 16 + (lane / 16) * 8;
      uint32_t b[4];
      ldmatrix_x4_trans(b, sv + key * kRow + dim);
      mma_16816(st.acc[2 * jd], a, b[0], b[1]);
      mma_16816(st.acc[2 * jd + 1], a, b[2], b[3]);
    }
  }
}

// The full row sums once the keys are done (each thread held a quarter of its rows' columns).
template <int HD>
__device__ __forceinline__ void reduce_row_sums(WarpRows<HD>& st) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
  }
}

}  // namespace ga::cuda::detail
