// The instruction list of the persistent decode kernel (persistent_decode.h): what one launch runs for one
// token of a model on the step seam, built once per model by the plan builder (plan_builder.h) from the
// architecture's own Program, as FlashInfer's plan/run split.
//
// Plain data shared by the host (the builder, compiled without CUDA, so that CI checks it) and the device
// (the kernel reads the instructions from global memory). Pointers are device addresses.
//
// Execution model (persistent_decode.cu): one CTA per SM runs every instruction in order. An instruction is
// n_tiles independent tiles; CTA c runs the tiles the ownership rule below gives it, after waiting until every
// instruction in its dependency list has been finished by all of its CTAs (a counter per instruction in global
// memory, one arrival per CTA that owns a tile of it). No kernel boundary, no grid-wide barrier: a CTA waits only
// for what it reads. The GEMVs' weights do not depend on anything, so a producer warp per CTA streams them into a
// shared-memory ring ahead of the consumers, across instruction boundaries: while the consumers wait for a
// dependency, the next matrices are already in flight.
#pragma once

#include <cstdint>

#include "gpu_accel/dtype.h"

#if defined(__CUDACC__)
#define GA_PERSISTENT_HD __host__ __device__
#else
#define GA_PERSISTENT_HD
#endif

namespace ga::cuda::persistent {

// 8 consumer warps + the producer. (A CTA of 9 warps gets 168 registers a thread, as one of 12 would: the register
// file is four quarters of 16 Ki, each holding every fourth warp. 11 consumer warps measured slower on the H200:
// tiles of 11 rows split the power-of-two matrices less evenly over the CTAs.)
inline constexpr int kConsumerWarps = 8;
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
inline constexpr int kSlotBytes = 32768;                    // one ring slot: a segment of a tile's rows
inline constexpr int kMaxSlots = 8;
inline constexpr int kMaxWarpRows = 4;        // slot rows one consumer warp reads per GEMV tile (gate + up for kGlu)
inline constexpr int kAttnMaxGroup = 8;       // query heads per KV head
inline constexpr int kAttnMaxGroupDims = 32;  // group * head_dim / 32: accumulators per lane
inline constexpr int kAttnMinChunk = 32;      // positions below which a KV head is not split further
inline constexpr int kGluTileCols = 2048;
inline constexpr int kXInt8BlockBytes = 64;   // x_int8.cuh's kXBlockBytes: 32 activations as two int8 digits

// Trace mode's globaltimer stamps per CTA and instruction (StepArgs::trace), in this order: the CTA reached the
// instruction, its dependencies were met, its inputs were staged (a GEMV's x, the attention's heads), its first
// data arrived (a GEMV's first ring slot, the attention's first cache rows), its last tile was computed, and its
// arrival was released.
enum TraceStamp : int { kStampStart = 0, kStampMet, kStampStaged, kStampFirst, kStampComputed, kStampDone, kTraceStamps };

enum class OpKind : uint8_t { kGemv = 0, kAttention = 1, kRmsNorm = 2, kGlu = 3 };

// Where a GEMV's x comes from (it is staged in shared memory, cols floats, before the first tile):
enum class XLoad : uint8_t {
  kPlain = 0,      // x[0, cols)
  kRmsNorm = 1,    // rmsnorm(x) * norm_w: the norm of the step op fused into every CTA of its readers
  kAttnMerge = 2,  // the attention instruction's per-chunk partials merged by their log-sum-exp
};

// What a GEMV writes for output row r (dot = row r of W times x):
enum class Epilogue : uint8_t {
  kStore = 0,       // y[r] = dot
  kAccumulate = 1,  // y[r] += dot (the residual stream: the next norm's residual add, folded in)
  kGlu = 2,         // y[r] = act(gate_r . x) * (up_r . x): gate rows of w, up rows of w2
  kSoftcap = 3,     // y[r] = softcap * tanh(dot / softcap) (Gemma 2's final logits)
};

struct GemvInstr {
  const uint8_t* w = nullptr;   // rows of row_bytes bytes, packed
  const uint8_t* w2 = nullptr;  // kGlu: the up rows (same type and width); else null
  int64_t row_bytes = 0;
  int32_t rows = 0;             // output rows
  int32_t cols = 0;
  int32_t blocks_per_row = 0;   // decoder blocks (16-byte chunks for F16/BF16/F32)
  int32_t block_bytes = 0;      // bytes of one decoder block
  // A tile is kConsumerWarps * rows_per_warp output rows; consumer warp w owns rows [w * rpw, (w + 1) * rpw) of
  // it whole (for kGlu also their up rows), so no tile ends in a reduction across warps.
  int32_t rows_per_warp = 0;
  int32_t tile_rows = 0;        // output rows per tile: kConsumerWarps * rows_per_warp
  int32_t seg_blocks = 0;       // blocks of a row per ring slot
  int32_t n_segs = 0;
  int32_t slot_region = 0;      // bytes of a slot per slot row (a multiple of 16): row i of a slot at i * slot_region
  DType type = DType::F32;
  XLoad xload = XLoad::kPlain;
  Epilogue epi = Epilogue::kStore;
  uint8_t act = 0;              // detail::GluAct for kGlu
  // x also as int8 digits (x_int8.cuh) and the dot in DP4A (gemv_int8.cuh's block math): Q4_0, Q4_1, Q5_0, Q5_1,
  // Q8_0 and Q4_K; a lane then takes one block of 32 weights of a row (a Q4_K sub-block) instead of a part of one.
  uint8_t int8_x = 0;
  // Whole rows per slot, packed: one segment a row (n_segs 1), rows of a multiple of 16 bytes at 16-byte aligned
  // addresses and slot_region == row_bytes, so a slot holds the tile's rows exactly as they lie in memory (for kGlu
  // its gate rows, then its up rows) and the producer fills it with one bulk copy (two for kGlu) instead of one per
  // row: small copies stream slower.
  uint8_t packed = 0;
  const float* x = nullptr;     // kPlain / kRmsNorm: [cols]; kAttnMerge: the partials
  const float* norm_w = nullptr;
  float eps = 0.0f;
  float softcap = 0.0f;
  float* y = nullptr;
  // kAttnMerge: the attention instruction's shape (the merge finds its chunk count from the position as the
  // attention did)
  int32_t merge_heads = 0, merge_head_dim = 0, merge_chunks = 0, merge_window = -1;
};

// One attention layer's step for the token: q/k bias, per-head q/k RMSNorm (Qwen3, Gemma 3), RoPE, the f16 K/V
// store of the token, and attention over the cached positions. Tile t: KV head t % n_head_kv, chunk t / n_head_kv of
// the positions (how many chunks are used depends on the position: kAttnMinChunk positions at least each). A tile
// writes its query heads' partial (unnormalized output, max, sum) of its chunk; the reader merges them.
struct AttnInstr {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* bq = nullptr;  // all three or none
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
  const double* inv_freq = nullptr;  // [n_rot / 2]
  int32_t n_rot = 0;
  bool neox = false;
  float mscale = 1.0f;
  uint16_t* k_cache = nullptr;  // f16 [rows][n_head_kv][head_dim]
  uint16_t* v_cache = nullptr;
  int64_t cache_bytes = 0;      // of each (dependency ranges)
  int32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  int32_t window_left = -1;
  float softcap = 0.0f;
  int32_t n_chunks = 1;         // most chunks per KV head
  float* partials = nullptr;    // [n_chunks][n_head][head_dim + 2]: output, max, sum
};

// out = rmsnorm(v) * w with v = x, or v = residual += x (a norm the builder could not fold into its readers).
struct NormInstr {
  const float* x = nullptr;
  float* residual = nullptr;
  const float* w = nullptr;
  float* out = nullptr;
  int32_t n = 0;
  float eps = 0.0f;
};

// out = act(gate) * up, tiles of kGluTileCols (a GLU the builder could not fold into its GEMV).
struct GluInstr {
  const float* gate = nullptr;
  const float* up = nullptr;
  float* out = nullptr;
  int32_t n = 0;
  uint8_t act = 0;
};

struct Instr {
  OpKind kind = OpKind::kGemv;
  int32_t n_tiles = 0;
  int32_t rotation = 0;   // tile ownership offset (below)
  int32_t dep_begin = 0;  // into Plan::deps
  int32_t n_deps = 0;
  int32_t source_op = 0;  // the index of the step op it came from (trace, errors)
  GemvInstr gemv;
  AttnInstr attn;
  NormInstr norm;
  GluInstr glu;
};

// Tile ownership on a grid of g CTAs. GEMVs: CTA c runs the contiguous tiles [b(c'), b(c' + 1)) with
// c' = (c - rotation) mod g and b(k) = k * n_tiles / g, so a CTA's rows are consecutive (one weight stream);
// the other kinds: tile t runs on CTA (t + rotation) mod g. Either way min(n_tiles, g) CTAs own tiles (owners_of),
// and each of their consumer warps arrives on the instruction's counter once (arrivals_of). The builder rotates each instruction by the tiles
// before it, so the CTAs that get one tile more differ from one instruction to the next.
struct TileRange {
  int32_t first = 0, step = 1, count = 0;
};

GA_PERSISTENT_HD inline TileRange tiles_of(const Instr& in, int32_t cta, int32_t g) {
  const int32_t c = ((cta - in.rotation) % g + g) % g;
  TileRange r;
  if (in.kind == OpKind::kGemv) {
    const int64_t b0 = static_cast<int64_t>(c) * in.n_tiles / g, b1 = static_cast<int64_t>(c + 1) * in.n_tiles / g;
    r.first = static_cast<int32_t>(b0);
    r.count = static_cast<int32_t>(b1 - b0);
    r.step = 1;
  } else {
    r.first = c;
    r.step = g;
    r.count = c < in.n_tiles ? (in.n_tiles - c + g - 1) / g : 0;
  }
  return r;
}

// The weight bytes one step of a GEMV instruction streams (kGlu: its gate and its up rows).
inline int64_t gemv_weight_bytes(const GemvInstr& g) {
  return int64_t{g.rows} * (g.epi == Epilogue::kGlu ? 2 : 1) * g.row_bytes;
}

// The CTAs that own a tile of `in`: min(n_tiles, g).
GA_PERSISTENT_HD inline int32_t owners_of(const Instr& in, int32_t g) { return in.n_tiles < g ? in.n_tiles : g; }

// The count an instruction's counter reaches when it is done: every consumer warp of every owner releases its own
// writes once (no CTA barrier before the first release: the warps' release fences overlap).
GA_PERSISTENT_HD inline int32_t arrivals_of(const Instr& in, int32_t g) { return owners_of(in, g) * kConsumerWarps; }

}  // namespace ga::cuda::persistent
