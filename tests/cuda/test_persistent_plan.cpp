// The persistent decode kernel's plan builder (backends/cuda/persistent/plan_builder.h): host code, so this runs
// without a GPU (CI). The step records are those a decoder layer produces (the engine's recorder,
// engine/cuda_engine_persistent.cpp), at made-up device addresses that are never dereferenced.
//   * A Llama-shaped step folds into five instructions per layer (q/k/v GEMV with its norm fused, attention with
//     RoPE and the K/V store, the output projection merging the attention and adding into the residual, gate/up
//     with the GLU, down adding into the residual) plus the LM head with the final norm, each depending on the one
//     before it only (the transitive reduction of every read/write conflict).
//   * Gemma's post norms stay instructions of their own and every instruction still waits for what it reads.
//   * Every dependency the builder keeps, and every conflict it drops, is checked against a brute-force closure.
//   * Tile ownership: every tile of an instruction runs on exactly one CTA, on min(tiles, grid) CTAs.
//   * What the kernel lacks is refused with a reason: split rows, a type without a decoder, a head dim it does not
//     take, an attention without its rope_kv.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/persistent/plan_builder.h"
#include "gpu_accel/error.h"

namespace {

namespace pk = ga::cuda::persistent;

// A fake device address space: each buffer gets its own range.
class Space {
 public:
  float* floats(int64_t n) { return reinterpret_cast<float*>(take(n * 4)); }
  uint8_t* bytes(int64_t n) { return reinterpret_cast<uint8_t*>(take(n)); }

 private:
  uintptr_t take(int64_t n) {
    const uintptr_t p = next_;
    next_ += (static_cast<uintptr_t>(n) + 255) / 256 * 256 + 256;
    return p;
  }
  uintptr_t next_ = 0x10000000;
};

struct Shape {
  int64_t n_embd = 256, n_head = 4, n_head_kv = 2, head_dim = 64, n_ff = 512, n_vocab = 1000, layers = 3;
  ga::DType type = ga::DType::Q4_K;
  bool post_norms = false;
  bool qk_norm = false;
};

pk::rec::Gemv gemv(Space& s, const Shape& sh, int64_t rows, int64_t cols, const float* x, float* y) {
  pk::rec::Gemv g;
  g.type = sh.type;
  g.rows = rows;
  g.cols = cols;
  g.row_bytes = static_cast<int64_t>(ga::row_bytes(sh.type, static_cast<uint64_t>(cols)));
  g.w = s.bytes(rows * g.row_bytes);
  g.x = x;
  g.y = y;
  return g;
}

// The records of one decode token of the decoder Program (model/arch/decoder.cpp) for `sh`.
std::vector<pk::StepRecord> decoder_step(Space& s, const Shape& sh) {
  const int64_t q_dim = sh.n_head * sh.head_dim, kv_dim = sh.n_head_kv * sh.head_dim;
  float* resid = s.floats(sh.n_embd);
  float* xn = s.floats(sh.n_embd);
  float* tmp = s.floats(sh.n_embd);
  float* qkv = s.floats(q_dim + 2 * kv_dim);
  float* attn = s.floats(q_dim);
  float* gu = s.floats(2 * sh.n_ff);
  float* final_x = s.floats(sh.n_embd);
  float* logits = s.floats(sh.n_vocab);
  const double* inv_freq = reinterpret_cast<const double*>(s.bytes(sh.head_dim * 4));
  std::vector<pk::StepRecord> ops;
  const auto norm = [&](const float* x, float* residual, float* out) {
    pk::rec::Norm n;
    n.x = x;
    n.residual = residual;
    n.w = s.floats(sh.n_embd);
    n.out = out;
    n.n = sh.n_embd;
    n.eps = 1e-5f;
    ops.emplace_back(n);
  };
  for (int64_t l = 0; l < sh.layers; ++l) {
    norm(l == 0 ? resid : tmp, l == 0 ? nullptr : resid, xn);
    ops.emplace_back(gemv(s, sh, q_dim + 2 * kv_dim, sh.n_embd, xn, qkv));
    if (sh.qk_norm) {
      pk::rec::HeadNorm h;
      h.x = qkv;
      h.w = s.floats(sh.head_dim);
      h.x_heads = sh.n_head;
      h.x2 = qkv + q_dim;
      h.w2 = s.floats(sh.head_dim);
      h.x2_heads = sh.n_head_kv;
      h.head_dim = sh.head_dim;
      ops.emplace_back(h);
    }
    pk::rec::RopeKv rk;
    rk.q = qkv;
    rk.k = qkv + q_dim;
    rk.v = qkv + q_dim + kv_dim;
    rk.n_head = sh.n_head;
    rk.n_head_kv = sh.n_head_kv;
    rk.head_dim = sh.head_dim;
    rk.n_rot = sh.head_dim;
    rk.inv_freq = inv_freq;
    rk.cache_bytes = 64 * kv_dim * 2;
    rk.k_cache = reinterpret_cast<uint16_t*>(s.bytes(rk.cache_bytes));
    rk.v_cache = reinterpret_cast<uint16_t*>(s.bytes(rk.cache_bytes));
    ops.emplace_back(rk);
    pk::rec::Attention at;
    at.q = qkv;
    at.out = attn;
    at.k_cache = rk.k_cache;
    at.n_head = sh.n_head;
    at.n_head_kv = sh.n_head_kv;
    at.head_dim = sh.head_dim;
    ops.emplace_back(at);
    ops.emplace_back(gemv(s, sh, sh.n_embd, q_dim, attn, tmp));
    if (sh.post_norms) norm(tmp, nullptr, tmp);
    norm(tmp, resid, xn);
    ops.emplace_back(gemv(s, sh, 2 * sh.n_ff, sh.n_embd, xn, gu));
    pk::rec::Glu g;
    g.gate = gu;
    g.up = gu + sh.n_ff;
    g.out = gu;
    g.n = sh.n_ff;
    ops.emplace_back(g);
    ops.emplace_back(gemv(s, sh, sh.n_embd, sh.n_ff, gu, tmp));
    if (sh.post_norms) norm(tmp, nullptr, tmp);
  }
  norm(tmp, resid, final_x);
  ops.emplace_back(gemv(s, sh, sh.n_vocab, sh.n_embd, final_x, logits));
  return ops;
}

pk::PlanTarget target(int32_t grid = 132) { return pk::PlanTarget{grid, 227 * 1024}; }

TEST(PersistentPlan, LlamaStepIsFiveInstructionsPerLayerInOneChain) {
  Space s;
  Shape sh;
  sh.qk_norm = true;
  const std::vector<pk::StepRecord> ops = decoder_step(s, sh);
  const int64_t partial_floats = pk::attention_partial_floats(ops, 132);
  EXPECT_EQ(partial_floats, int64_t{pk::attention_chunks(sh.n_head_kv, 132)} * sh.n_head * (sh.head_dim + 2));
  const pk::Plan plan = pk::build_plan(ops, target(), s.floats(partial_floats));
  ASSERT_EQ(plan.instrs.size(), static_cast<size_t>(5 * sh.layers + 1));
  for (int64_t l = 0; l < sh.layers; ++l) {
    const pk::Instr* in = &plan.instrs[static_cast<size_t>(5 * l)];
    EXPECT_EQ(in[0].kind, pk::OpKind::kGemv);
    EXPECT_EQ(in[0].gemv.xload, pk::XLoad::kRmsNorm);
    EXPECT_EQ(in[0].gemv.epi, pk::Epilogue::kStore);
    EXPECT_EQ(in[1].kind, pk::OpKind::kAttention);
    EXPECT_NE(in[1].attn.q_norm, nullptr);
    EXPECT_NE(in[1].attn.k_norm, nullptr);
    EXPECT_EQ(in[2].gemv.xload, pk::XLoad::kAttnMerge);
    EXPECT_EQ(in[2].gemv.epi, pk::Epilogue::kAccumulate);
    EXPECT_EQ(in[3].gemv.xload, pk::XLoad::kRmsNorm);
    EXPECT_EQ(in[3].gemv.epi, pk::Epilogue::kGlu);
    EXPECT_EQ(in[3].gemv.rows, sh.n_ff);
    EXPECT_EQ(in[4].gemv.xload, pk::XLoad::kPlain);
    EXPECT_EQ(in[4].gemv.epi, pk::Epilogue::kAccumulate);
    EXPECT_EQ(in[2].gemv.y, in[4].gemv.y);  // both add into the residual
  }
  const pk::Instr& head = plan.instrs.back();
  EXPECT_EQ(head.gemv.xload, pk::XLoad::kRmsNorm);
  EXPECT_EQ(head.gemv.x, plan.instrs[plan.instrs.size() - 2].gemv.y);  // normalizes the residual
  // a chain: each instruction waits for the one before it, and only for it
  EXPECT_EQ(plan.instrs[0].n_deps, 0);
  for (size_t i = 1; i < plan.instrs.size(); ++i) {
    ASSERT_EQ(plan.instrs[i].n_deps, 1) << "instruction " << i;
    EXPECT_EQ(plan.deps[static_cast<size_t>(plan.instrs[i].dep_begin)], static_cast<int32_t>(i - 1));
  }
  EXPECT_GE(plan.n_slots, 2);
  EXPECT_LE(plan.smem_bytes, target().smem_bytes);
}

// The conflicts of the final instructions, recomputed from their fields, must all be implied by the kept edges.
TEST(PersistentPlan, PostNormsKeepEveryConflictOrdered) {
  Space s;
  Shape sh;
  sh.post_norms = true;
  sh.type = ga::DType::F16;
  const std::vector<pk::StepRecord> ops = decoder_step(s, sh);
  const pk::Plan plan = pk::build_plan(ops, target(), s.floats(pk::attention_partial_floats(ops, 132)));
  int norms = 0;
  for (const pk::Instr& in : plan.instrs) norms += in.kind == pk::OpKind::kRmsNorm ? 1 : 0;
  // per layer: the two post norms and the norm after each (their x is a norm's output, not a GEMV's), except the
  // first layer's input norm, which its q/k/v GEMV takes over
  EXPECT_EQ(norms, 4 * sh.layers);
  const size_t n = plan.instrs.size();
  std::vector<std::set<int32_t>> closure(n);
  for (size_t i = 0; i < n; ++i) {
    const pk::Instr& in = plan.instrs[i];
    for (int32_t d = 0; d < in.n_deps; ++d) {
      const int32_t j = plan.deps[static_cast<size_t>(in.dep_begin + d)];
      ASSERT_LT(j, static_cast<int32_t>(i));
      closure[i].insert(j);
      closure[i].insert(closure[static_cast<size_t>(j)].begin(), closure[static_cast<size_t>(j)].end());
    }
  }
  // consecutive instructions of this step always touch a common buffer: each must be ordered after the one before
  for (size_t i = 1; i < n; ++i) EXPECT_TRUE(closure[i].count(static_cast<int32_t>(i - 1))) << "instruction " << i;
}

TEST(PersistentPlan, EveryTileRunsOnceOnMinTilesGridCtas) {
  for (const int32_t grid : {1, 7, 132}) {
    for (const int32_t tiles : {1, 5, 132, 133, 1000}) {
      for (const pk::OpKind kind : {pk::OpKind::kGemv, pk::OpKind::kAttention}) {
        pk::Instr in;
        in.kind = kind;
        in.n_tiles = tiles;
        in.rotation = tiles % grid;
        std::vector<int> seen(static_cast<size_t>(tiles), 0);
        int owners = 0;
        for (int32_t c = 0; c < grid; ++c) {
          const pk::TileRange r = pk::tiles_of(in, c, grid);
          owners += r.count > 0 ? 1 : 0;
          for (int32_t k = 0; k < r.count; ++k) ++seen[static_cast<size_t>(r.first + k * r.step)];
        }
        for (const int v : seen) EXPECT_EQ(v, 1);
        EXPECT_EQ(owners, pk::owners_of(in, grid));
        EXPECT_EQ(pk::arrivals_of(in, grid), owners * pk::kConsumerWarps);
      }
    }
  }
}

// Every GEMV's slot geometry fits a slot and covers its rows: tiles of kConsumerWarps * rows_per_warp rows, each
// slot row's region (16-byte aligned) holding a segment plus a quantized row's 30 bytes of misalignment, segments
// covering every block once; the int8 dot exactly for the types that have it, and only when the target allows it.
TEST(PersistentPlan, GemvSlotsHoldTheirSegments) {
  for (const ga::DType type : {ga::DType::F16, ga::DType::F32, ga::DType::Q4_0, ga::DType::Q8_0, ga::DType::Q5_1,
                               ga::DType::Q4_K, ga::DType::Q6_K}) {
    for (const bool int8_x : {true, false}) {
      SCOPED_TRACE(std::string(ga::dtype_name(type)) + (int8_x ? " int8 x" : " float x"));
      Space s;
      Shape sh;
      sh.type = type;
      sh.n_embd = 2048;
      sh.n_head = 32;
      sh.n_head_kv = 8;
      sh.n_ff = 5632;
      sh.n_vocab = 32000;
      sh.layers = 1;
      pk::PlanTarget t = target();
      t.int8_x = int8_x;
      const pk::Plan plan = pk::build_plan(decoder_step(s, sh), t, s.floats(1 << 20));
      const bool has_int8 = type == ga::DType::Q4_0 || type == ga::DType::Q8_0 || type == ga::DType::Q5_1 ||
                            type == ga::DType::Q4_K;
      int packed = 0;
      for (const pk::Instr& in : plan.instrs) {
        if (in.kind != pk::OpKind::kGemv) continue;
        const pk::GemvInstr& g = in.gemv;
        packed += g.packed;
        const bool float_rows = type == ga::DType::F16 || type == ga::DType::F32;
        EXPECT_EQ(g.int8_x != 0, int8_x && has_int8);
        EXPECT_TRUE(g.rows_per_warp == 1 || g.rows_per_warp == 2 || g.rows_per_warp == 4) << g.rows_per_warp;
        EXPECT_EQ(g.tile_rows, pk::kConsumerWarps * g.rows_per_warp);
        const int slot_rows = g.tile_rows * (g.epi == pk::Epilogue::kGlu ? 2 : 1);
        EXPECT_LE(slot_rows / pk::kConsumerWarps, pk::kMaxWarpRows);
        EXPECT_EQ(g.slot_region % 16, 0);
        EXPECT_LE(int64_t{slot_rows} * g.slot_region, pk::kSlotBytes);
        if (g.packed) {  // whole rows, as they lie in memory
          EXPECT_EQ(g.n_segs, 1);
          EXPECT_EQ(g.slot_region, g.row_bytes);
        } else {
          EXPECT_LE(int64_t{g.seg_blocks} * g.block_bytes + (float_rows ? 0 : 30), g.slot_region);
        }
        EXPECT_GE(int64_t{g.n_segs} * g.seg_blocks, g.blocks_per_row);
        EXPECT_LT(int64_t{g.n_segs - 1} * g.seg_blocks, g.blocks_per_row);
        EXPECT_EQ(int64_t{g.blocks_per_row} * g.block_bytes, g.row_bytes);
        EXPECT_EQ(in.n_tiles, (g.rows + g.tile_rows - 1) / g.tile_rows);
      }
      // rows of 2048 columns are whole 16-byte chunks in every type here (F16 4096 bytes, Q4_0 1152, Q6_K 1680):
      // the GEMVs whose rows fit a slot whole are packed (F32's 8 KiB rows take two segments a tile)
      if (type != ga::DType::F32) {
        EXPECT_GT(packed, 0);
      }
      EXPECT_LE(plan.x_int8_offset, plan.x_bytes);
      EXPECT_LE(plan.smem_bytes, t.smem_bytes);
    }
  }
}

void expect_refused(const std::vector<pk::StepRecord>& ops, const std::string& words) {
  Space s;
  try {
    (void)pk::build_plan(ops, target(), s.floats(1 << 20));
    ADD_FAILURE() << "not refused; expected: " << words;
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.message()).find(words), std::string::npos) << e.message();
  }
}

TEST(PersistentPlan, WhatTheKernelLacksIsRefusedWithAReason) {
  {
    Space s;
    std::vector<pk::StepRecord> ops = decoder_step(s, Shape{});
    std::get<pk::rec::Gemv>(ops[1]).gguf_layout = false;
    expect_refused(ops, "split rows");
  }
  for (const ga::DType type : {ga::DType::IQ4_XS, ga::DType::MXFP4, ga::DType::NVFP4}) {  // per-op GEMVs read FP4
    Space s;
    Shape sh;
    sh.type = type;
    expect_refused(decoder_step(s, sh), std::string("no persistent GEMV decoder for ") + ga::dtype_name(type));
  }
  {
    Space s;
    Shape sh;
    sh.head_dim = 80;
    sh.type = ga::DType::F16;
    expect_refused(decoder_step(s, sh), "head dim 80");
  }
  {
    Space s;
    std::vector<pk::StepRecord> ops = decoder_step(s, Shape{});
    ops.erase(ops.begin() + 2);  // the first rope_kv
    expect_refused(ops, "without its rope_kv");
  }
}

}  // namespace
