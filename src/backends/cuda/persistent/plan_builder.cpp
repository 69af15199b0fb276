// The persistent decode kernel's plan builder (see the header for what it fuses and why).
#include "backends/cuda/persistent/plan_builder.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "gpu_accel/error.h"

namespace ga::cuda::persistent {
namespace {

struct Range {
  uintptr_t begin = 0, end = 0;
  bool overlaps(const Range& o) const { return begin < o.end && o.begin < end && begin < end && o.begin < o.end; }
};

template <class T>
Range floats(const T* p, int64_t n) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return Range{b, b + static_cast<uintptr_t>(n) * 4};
}

Range bytes(const void* p, int64_t n) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return Range{b, b + static_cast<uintptr_t>(n)};
}

// One instruction while the passes rewrite the list.
struct Node {
  Instr in;
  bool dead = false;
  // an attention's output view: what its readers read before the merge was folded into them
  Range attn_out;
};

std::vector<Range> reads_of(const Node& n) {
  const Instr& in = n.in;
  switch (in.kind) {
    case OpKind::kGemv: {
      const GemvInstr& g = in.gemv;
      std::vector<Range> r;
      if (g.xload == XLoad::kAttnMerge) {
        r.push_back(floats(g.x, int64_t{g.merge_chunks} * g.merge_heads * (g.merge_head_dim + 2)));
      } else {
        r.push_back(floats(g.x, g.cols));
      }
      if (g.epi == Epilogue::kAccumulate) r.push_back(floats(g.y, g.rows));
      return r;
    }
    case OpKind::kAttention: {
      const AttnInstr& a = in.attn;
      return {floats(a.q, int64_t{a.n_head} * a.head_dim), floats(a.k, int64_t{a.n_head_kv} * a.head_dim),
              floats(a.v, int64_t{a.n_head_kv} * a.head_dim), bytes(a.k_cache, a.cache_bytes),
              bytes(a.v_cache, a.cache_bytes)};
    }
    case OpKind::kRmsNorm: {
      std::vector<Range> r{floats(in.norm.x, in.norm.n)};
      if (in.norm.residual != nullptr) r.push_back(floats(in.norm.residual, in.norm.n));
      return r;
    }
    case OpKind::kGlu:
      return {floats(in.glu.gate, in.glu.n), floats(in.glu.up, in.glu.n)};
  }
  return {};
}

std::vector<Range> writes_of(const Node& n) {
  const Instr& in = n.in;
  switch (in.kind) {
    case OpKind::kGemv:
      return {floats(in.gemv.y, in.gemv.rows)};
    case OpKind::kAttention: {
      const AttnInstr& a = in.attn;
      return {floats(a.partials, int64_t{a.n_chunks} * a.n_head * (a.head_dim + 2)), bytes(a.k_cache, a.cache_bytes),
              bytes(a.v_cache, a.cache_bytes)};
    }
    case OpKind::kRmsNorm: {
      std::vector<Range> r{floats(in.norm.out, in.norm.n)};
      if (in.norm.residual != nullptr) r.push_back(floats(in.norm.residual, in.norm.n));
      return r;
    }
    case OpKind::kGlu:
      return {floats(in.glu.out, in.glu.n)};
  }
  return {};
}

bool touches(const std::vector<Range>& set, const Range& r) {
  return std::any_of(set.begin(), set.end(), [&](const Range& x) { return x.overlaps(r); });
}

// Whether node n writes r, counting an attention as the writer of its (folded) output view.
bool writes(const Node& n, const Range& r) {
  if (n.in.kind == OpKind::kAttention && n.attn_out.overlaps(r)) return true;
  return touches(writes_of(n), r);
}

// The live nodes after `from` that read r, up to (not including) the next live node that writes r.
std::vector<size_t> readers_until_rewritten(const std::vector<Node>& nodes, size_t from, const Range& r) {
  std::vector<size_t> out;
  for (size_t i = from + 1; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    if (touches(reads_of(nodes[i]), r)) out.push_back(i);
    if (writes(nodes[i], r)) break;
  }
  return out;
}

bool gemv_type_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0:
    case DType::Q5_1: case DType::Q8_0: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K: case DType::F8_B128:
      return true;
    default:
      return false;
  }
}

// Whether the kernel has the int8-activation dot for a type (gemv_int8.cuh's Int8Traits::kEnabled types).
bool int8_type(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: case DType::Q4_K:
      return true;
    default:
      return false;
  }
}

// Lanes of a warp that share one decoder block (weight_decode.cuh's kLanesPerBlock; on the int8 path one lane per
// block of 32 weights, so 8 per Q4_K super-block): segments are cut into whole iterations of 32 / lanes blocks so
// that no lane idles in a segment's last one.
int32_t lanes_per_block(DType t, bool int8_x) {
  if (is_float_type(t)) return 1;
  if (int8_x) return t == DType::Q4_K ? 8 : 1;
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: return 4;
    default: return 16;  // the K-quants and F8_B128
  }
}

// Decoder blocks of the kernel: 16-byte chunks for the float types, the GGUF block otherwise.
void block_shape(DType t, int64_t& elems, int64_t& bytes_per_block) {
  if (is_float_type(t)) {
    bytes_per_block = 16;
    elems = t == DType::F32 ? 4 : 8;
    return;
  }
  const DTypeTraits& tr = traits(t);
  elems = tr.block_size;
  bytes_per_block = tr.type_size;
}

std::string where(size_t op) { return "step op " + std::to_string(op); }

Node gemv_node(const rec::Gemv& g, size_t op) {
  GA_CHECK(g.gguf_layout, Unsupported, where(op), ": a ", dtype_name(g.type),
           " matrix in split rows (the persistent kernel decodes the GGUF block order)");
  GA_CHECK(gemv_type_supported(g.type), Unsupported, where(op), ": no persistent GEMV decoder for ", dtype_name(g.type));
  GA_CHECK(g.rows > 0 && g.cols > 0 && g.rows < (int64_t{1} << 30) && g.cols < (int64_t{1} << 24), Unsupported,
           where(op), ": a [", g.rows, " x ", g.cols, "] matrix");
  int64_t elems = 0, bpb = 0;
  block_shape(g.type, elems, bpb);
  GA_CHECK(g.cols % elems == 0 && g.row_bytes == g.cols / elems * bpb, Unsupported, where(op), ": rows of ", g.cols,
           " ", dtype_name(g.type), " weights in ", g.row_bytes, " bytes");
  Node n;
  n.in.kind = OpKind::kGemv;
  n.in.source_op = static_cast<int32_t>(op);
  GemvInstr& i = n.in.gemv;
  i.w = g.w;
  i.row_bytes = g.row_bytes;
  i.rows = static_cast<int32_t>(g.rows);
  i.cols = static_cast<int32_t>(g.cols);
  i.blocks_per_row = static_cast<int32_t>(g.cols / elems);
  i.type = g.type;
  i.x = g.x;
  i.y = g.y;
  return n;
}

Node attention_node(const rec::HeadNorm* hn, const rec::RopeKv& rk, const rec::Attention& at, size_t op, int32_t grid,
                    float* partials) {
  GA_CHECK(at.q == rk.q && at.k_cache == rk.k_cache && at.n_head == rk.n_head && at.n_head_kv == rk.n_head_kv &&
               at.head_dim == rk.head_dim,
           Unsupported, where(op), ": an attention that does not read the rope_kv before it");
  const int64_t hd = rk.head_dim;
  GA_CHECK(rk.n_head_kv > 0 && rk.n_head % rk.n_head_kv == 0, Unsupported, where(op), ": ", rk.n_head, " / ",
           rk.n_head_kv, " heads");
  const int64_t group = rk.n_head / rk.n_head_kv;
  const int64_t lane_dims = hd <= 32 ? 1 : hd / 32;
  // multiples of 8: the merge in the output projection reads runs of 8 outputs of a head
  GA_CHECK(hd % 8 == 0 && (hd <= 32 || (hd % 32 == 0 && (lane_dims <= 4 || lane_dims == 8))), Unsupported, where(op),
           ": head dim ", hd, " (the persistent attention takes 8, 16, 24, 32, 64, 96, 128 or 256)");
  GA_CHECK(group <= kAttnMaxGroup && group * lane_dims <= kAttnMaxGroupDims, Unsupported, where(op), ": ", group,
           " query heads per KV head of ", hd);
  Node n;
  n.in.kind = OpKind::kAttention;
  n.in.source_op = static_cast<int32_t>(op);
  AttnInstr& a = n.in.attn;
  a.q = rk.q;
  a.k = rk.k;
  a.v = rk.v;
  a.bq = rk.bq;
  a.bk = rk.bk;
  a.bv = rk.bv;
  if (hn != nullptr) {
    GA_CHECK(hn->x == rk.q && hn->x_heads == rk.n_head && hn->head_dim == hd &&
                 ((hn->x2 == nullptr) || (hn->x2 == rk.k && hn->x2_heads == rk.n_head_kv)),
             Unsupported, where(op), ": per-head norms of other views than the rope_kv's q and k");
    a.q_norm = hn->w;
    a.k_norm = hn->x2 != nullptr ? hn->w2 : nullptr;
    a.norm_eps = hn->eps;
  }
  a.inv_freq = rk.inv_freq;
  a.n_rot = static_cast<int32_t>(rk.n_rot);
  a.neox = rk.neox;
  a.mscale = rk.mscale;
  a.k_cache = rk.k_cache;
  a.v_cache = rk.v_cache;
  a.cache_bytes = rk.cache_bytes;
  a.n_head = static_cast<int32_t>(rk.n_head);
  a.n_head_kv = static_cast<int32_t>(rk.n_head_kv);
  a.head_dim = static_cast<int32_t>(hd);
  a.scale = at.scale;
  a.window_left = static_cast<int32_t>(at.window_left);
  a.softcap = at.softcap;
  a.n_chunks = attention_chunks(rk.n_head_kv, grid);
  a.partials = partials;
  n.attn_out = floats(at.out, rk.n_head * hd);
  return n;
}

// Converts the records into nodes, fusing head norm + rope_kv + attention, and a softcap into its GEMV.
std::vector<Node> convert(std::span<const StepRecord> ops, int32_t grid, float* partials) {
  std::vector<Node> nodes;
  for (size_t i = 0; i < ops.size(); ++i) {
    const StepRecord& r = ops[i];
    if (const auto* g = std::get_if<rec::Gemv>(&r)) {
      nodes.push_back(gemv_node(*g, i));
    } else if (const auto* nm = std::get_if<rec::Norm>(&r)) {
      Node n;
      n.in.kind = OpKind::kRmsNorm;
      n.in.source_op = static_cast<int32_t>(i);
      n.in.norm = NormInstr{nm->x, nm->residual, nm->w, nm->out, static_cast<int32_t>(nm->n), nm->eps};
      nodes.push_back(n);
    } else if (const auto* gl = std::get_if<rec::Glu>(&r)) {
      Node n;
      n.in.kind = OpKind::kGlu;
      n.in.source_op = static_cast<int32_t>(i);
      n.in.glu = GluInstr{gl->gate, gl->up, gl->out, static_cast<int32_t>(gl->n), gl->act};
      nodes.push_back(n);
    } else if (const auto* sc = std::get_if<rec::Softcap>(&r)) {
      GA_CHECK(!nodes.empty() && nodes.back().in.kind == OpKind::kGemv && nodes.back().in.gemv.y == sc->y &&
                   nodes.back().in.gemv.rows == sc->n && nodes.back().in.gemv.epi == Epilogue::kStore,
               Unsupported, where(i), ": a softcap that does not follow the GEMV of its values");
      nodes.back().in.gemv.epi = Epilogue::kSoftcap;
      nodes.back().in.gemv.softcap = sc->cap;
    } else if (std::holds_alternative<rec::Attention>(r)) {
      GA_THROW(Unsupported, where(i), ": an attention without its rope_kv before it");
    } else {
      const rec::HeadNorm* hn = std::get_if<rec::HeadNorm>(&r);
      const size_t rk_at = hn != nullptr ? i + 1 : i;
      GA_CHECK(rk_at + 1 < ops.size() && std::holds_alternative<rec::RopeKv>(ops[rk_at]) &&
                   std::holds_alternative<rec::Attention>(ops[rk_at + 1]),
               Unsupported, where(i), ": a head norm or rope_kv without the attention right after it");
      nodes.push_back(attention_node(hn, std::get<rec::RopeKv>(ops[rk_at]), std::get<rec::Attention>(ops[rk_at + 1]),
                                     i, grid, partials));
      i = rk_at + 1;
    }
  }
  return nodes;
}

// The attention's output is read by its projection: the merge of the partials moves into that GEMV's x load.
void fold_attention_merges(std::vector<Node>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].in.kind != OpKind::kAttention) continue;
    const Range out = nodes[i].attn_out;
    const AttnInstr& a = nodes[i].in.attn;
    const std::vector<size_t> readers = readers_until_rewritten(nodes, i, out);
    GA_CHECK(!readers.empty(), Unsupported, where(static_cast<size_t>(nodes[i].in.source_op)),
             ": an attention output nothing reads");
    for (const size_t r : readers) {
      GemvInstr& g = nodes[r].in.gemv;
      GA_CHECK(nodes[r].in.kind == OpKind::kGemv && g.xload == XLoad::kPlain &&
                   reinterpret_cast<uintptr_t>(g.x) == out.begin && int64_t{g.cols} * 4 == int64_t(out.end - out.begin),
               Unsupported, where(static_cast<size_t>(nodes[r].in.source_op)),
               ": the attention output is read by an op other than a projection of all of it");
      g.xload = XLoad::kAttnMerge;
      g.x = a.partials;
      g.merge_heads = a.n_head;
      g.merge_head_dim = a.head_dim;
      g.merge_chunks = a.n_chunks;
      g.merge_window = a.window_left;
    }
  }
}

// GEMV into t, then rmsnorm(residual += t) with t read by nothing else: the GEMV adds into the residual.
void fold_residual_adds(std::vector<Node>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.dead || n.in.kind != OpKind::kRmsNorm || n.in.norm.residual == nullptr) continue;
    const Range x = floats(n.in.norm.x, n.in.norm.n), res = floats(n.in.norm.residual, n.in.norm.n);
    // the producer of x: the last live node before n that writes it
    std::optional<size_t> producer;
    for (size_t j = i; j-- > 0;) {
      if (!nodes[j].dead && writes(nodes[j], x)) {
        producer = j;
        break;
      }
    }
    if (!producer) continue;
    Node& p = nodes[*producer];
    if (p.in.kind != OpKind::kGemv || p.in.gemv.epi != Epilogue::kStore || floats(p.in.gemv.y, p.in.gemv.rows).begin != x.begin ||
        p.in.gemv.rows != n.in.norm.n) {
      continue;
    }
    bool clear = true;  // nothing between reads or writes x or the residual
    for (size_t j = *producer + 1; j < i && clear; ++j) {
      if (nodes[j].dead) continue;
      clear = !touches(reads_of(nodes[j]), x) && !touches(reads_of(nodes[j]), res) && !writes(nodes[j], x) &&
              !writes(nodes[j], res);
    }
    if (!clear || touches(reads_of(p), res)) continue;
    // and x is dead after the norm (nothing reads it before it is written again)
    if (!readers_until_rewritten(nodes, i, x).empty()) continue;
    p.in.gemv.epi = Epilogue::kAccumulate;
    p.in.gemv.y = n.in.norm.residual;
    n.in.norm.x = n.in.norm.residual;
    n.in.norm.residual = nullptr;
  }
}

// rmsnorm(x) -> out read only by GEMVs of all of it: each of them normalizes x while staging it.
void fold_norms_into_readers(std::vector<Node>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.dead || n.in.kind != OpKind::kRmsNorm || n.in.norm.residual != nullptr) continue;
    const Range out = floats(n.in.norm.out, n.in.norm.n), x = floats(n.in.norm.x, n.in.norm.n);
    if (out.overlaps(x)) continue;  // in place: its readers would see the normalized values as their source
    const std::vector<size_t> readers = readers_until_rewritten(nodes, i, out);
    if (readers.empty()) continue;
    bool ok = true;
    for (const size_t r : readers) {
      const GemvInstr& g = nodes[r].in.gemv;
      ok = ok && nodes[r].in.kind == OpKind::kGemv && g.xload == XLoad::kPlain && g.x == n.in.norm.out &&
           g.cols == n.in.norm.n;
    }
    for (size_t j = i + 1; ok && j <= readers.back(); ++j) ok = nodes[j].dead || !writes(nodes[j], x);
    if (!ok) continue;
    for (const size_t r : readers) {
      GemvInstr& g = nodes[r].in.gemv;
      g.xload = XLoad::kRmsNorm;
      g.x = n.in.norm.x;
      g.norm_w = n.in.norm.w;
      g.eps = n.in.norm.eps;
    }
    n.dead = true;
  }
}

// The GEMV(s) of gate and up, then act(gate) * up read by nothing else: one GEMV over paired rows.
void fold_glus(std::vector<Node>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.dead || n.in.kind != OpKind::kGlu) continue;
    const GluInstr& gl = n.in.glu;
    const Range gate = floats(gl.gate, gl.n), up = floats(gl.up, gl.n);
    std::optional<size_t> pg, pu;
    for (size_t j = i; j-- > 0;) {
      if (nodes[j].dead) continue;
      if (!pg && writes(nodes[j], gate)) pg = j;
      if (!pu && writes(nodes[j], up)) pu = j;
      if (pg && pu) break;
    }
    if (!pg || !pu || nodes[*pg].in.kind != OpKind::kGemv || nodes[*pu].in.kind != OpKind::kGemv) continue;
    GemvInstr& a = nodes[*pg].in.gemv;
    const GemvInstr& b = nodes[*pu].in.gemv;
    if (a.epi != Epilogue::kStore || b.epi != Epilogue::kStore) continue;
    const uint8_t* up_rows = nullptr;
    if (*pg == *pu) {  // one product of [gate | up]
      if (a.y != gl.gate || int64_t{a.rows} != 2 * gl.n || gl.up != gl.gate + gl.n) continue;
      up_rows = a.w + gl.n * a.row_bytes;
    } else {
      if (a.y != gl.gate || b.y != gl.up || a.rows != gl.n || b.rows != gl.n || a.type != b.type || a.cols != b.cols ||
          a.xload != b.xload || a.x != b.x || a.norm_w != b.norm_w) {
        continue;
      }
      up_rows = b.w;
    }
    const size_t first = std::min(*pg, *pu), last = std::max(*pg, *pu);
    bool clear = true;  // gate and up are read by nothing but the GLU, before and after it
    for (size_t j = first + 1; j < i && clear; ++j) {
      if (j == last || nodes[j].dead) continue;
      clear = !touches(reads_of(nodes[j]), gate) && !touches(reads_of(nodes[j]), up) && !writes(nodes[j], gate) &&
              !writes(nodes[j], up);
    }
    const Range out = floats(gl.out, gl.n);
    if (!clear || !readers_until_rewritten(nodes, i, up).empty() ||
        (!out.overlaps(gate) && !readers_until_rewritten(nodes, i, gate).empty())) {
      continue;
    }
    a.w2 = up_rows;
    a.rows = gl.n;
    a.epi = Epilogue::kGlu;
    a.act = gl.act;
    a.y = gl.out;
    if (*pg != *pu) nodes[*pu].dead = true;
    // keep the surviving GEMV where the later of the two was: nothing in between touches its input or output
    n.dead = true;
  }
}

// Bytes of x one lane reads from shared memory per block of a row: float x for its elements, or a block of 32's
// two int8 digits and its (d_x, sum).
int64_t x_bytes_per_row(const GemvInstr& g) {
  return g.int8_x ? int64_t{g.cols} / 32 * (kXInt8BlockBytes + 8) : int64_t{g.cols} * 4;
}

// The slot geometry of a GEMV for `rpw` rows per warp: region, segments (even ones, of whole warp iterations where
// they fit: a row of 256 chunks in segments of 254 + 2 would cost a second slot round trip for almost nothing), and
// the share of a segment's lane iterations that have a block.
struct SlotShape {
  int32_t region = 0, seg_blocks = 0, n_segs = 0;
  double lane_use = 0.0;
};

SlotShape slot_shape(const GemvInstr& g, int32_t rpw, int64_t bpb) {
  SlotShape sh;
  const int64_t rows_in_slot = int64_t{kConsumerWarps} * rpw * (g.epi == Epilogue::kGlu ? 2 : 1);
  // a quantized row's segment may start anywhere in a 16-byte chunk: up to 30 bytes more (float rows are whole chunks)
  const int64_t region = kSlotBytes / rows_in_slot / 16 * 16;
  const int64_t most = (region - (is_float_type(g.type) ? 0 : 32)) / bpb;
  if (most < 1) return sh;
  int64_t n_segs = (g.blocks_per_row + most - 1) / most;
  const int64_t per_iter = 32 / lanes_per_block(g.type, g.int8_x != 0);
  int64_t seg = (g.blocks_per_row + n_segs - 1) / n_segs;
  const int64_t rounded = (seg + per_iter - 1) / per_iter * per_iter;
  if (rounded <= most) seg = rounded;
  n_segs = (g.blocks_per_row + seg - 1) / seg;
  sh.region = static_cast<int32_t>(region);
  sh.seg_blocks = static_cast<int32_t>(seg);
  sh.n_segs = static_cast<int32_t>(n_segs);
  sh.lane_use = static_cast<double>(g.blocks_per_row) / static_cast<double>(n_segs * ((seg + per_iter - 1) / per_iter) * per_iter);
  return sh;
}

// Tiles, rows per warp, segments and the checks of a GEMV the builder made. Rows per warp: the choice that gives
// the busiest CTA the fewest weight bytes (counting the lanes a segment leaves idle): the step is a chain, so an
// instruction lasts as long as its busiest CTA; among choices within 2 % of that, the one whose lanes read the
// fewest x bytes (one x load serves a warp's rpw rows). A warp reads at most kMaxWarpRows rows of a slot, so a GLU
// (gate and up rows) takes at most half as many outputs.
void size_gemv(GemvInstr& g, int32_t& n_tiles, const PlanTarget& target, size_t op) {
  GA_CHECK(!touches({floats(g.y, g.rows)}, g.xload == XLoad::kAttnMerge ? Range{} : floats(g.x, g.cols)), Unsupported,
           where(op), ": a GEMV that writes its own input");
  int64_t elems = 0, bpb = 0;
  block_shape(g.type, elems, bpb);
  g.block_bytes = static_cast<int32_t>(bpb);
  // Q4_K's int8 lanes read a super-block's head and qs with 16-byte loads: rows of whole chunks, aligned
  g.int8_x = target.int8_x && int8_type(g.type) &&
             (g.type != DType::Q4_K ||
              (g.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(g.w) % 16 == 0 &&
               (g.w2 == nullptr || reinterpret_cast<uintptr_t>(g.w2) % 16 == 0)));
  const int32_t most = g.epi == Epilogue::kGlu ? kMaxWarpRows / 2 : kMaxWarpRows;
  double stream[kMaxWarpRows + 1] = {}, smem[kMaxWarpRows + 1] = {};
  SlotShape shapes[kMaxWarpRows + 1];
  double best_stream = -1.0;
  for (int32_t rpw = 1; rpw <= most; rpw *= 2) {
    shapes[rpw] = slot_shape(g, rpw, bpb);
    if (shapes[rpw].n_segs == 0) continue;
    const int64_t tile = int64_t{kConsumerWarps} * rpw;
    const int64_t tiles = (g.rows + tile - 1) / tile;
    const double busiest = static_cast<double>((tiles + target.grid - 1) / target.grid * tile);
    const double row = static_cast<double>(g.row_bytes * (g.epi == Epilogue::kGlu ? 2 : 1));
    stream[rpw] = busiest * row / shapes[rpw].lane_use;
    smem[rpw] = busiest * (row + static_cast<double>(x_bytes_per_row(g)) / rpw);
    if (best_stream < 0.0 || stream[rpw] < best_stream) best_stream = stream[rpw];
  }
  GA_CHECK(best_stream >= 0.0, Internal, where(op), ": a block larger than a slot row");
  // with target.prefer_packed, a choice whose tile fits a slot whole (one bulk copy a slot) goes first
  bool any_whole = false;
  for (int32_t rpw = 1; rpw <= most; rpw *= 2) {
    any_whole = any_whole || (shapes[rpw].n_segs == 1 && stream[rpw] <= best_stream * 1.02);
  }
  const bool want_whole = target.prefer_packed && any_whole;
  double best_smem = -1.0;
  for (int32_t rpw = 1; rpw <= most; rpw *= 2) {
    if (shapes[rpw].n_segs == 0 || stream[rpw] > best_stream * 1.02) continue;
    if (want_whole && shapes[rpw].n_segs != 1) continue;
    if (best_smem < 0.0 || smem[rpw] < best_smem) {
      best_smem = smem[rpw];
      g.rows_per_warp = rpw;
      g.slot_region = shapes[rpw].region;
      g.seg_blocks = shapes[rpw].seg_blocks;
      g.n_segs = shapes[rpw].n_segs;
    }
  }
  g.tile_rows = kConsumerWarps * g.rows_per_warp;
  n_tiles = (g.rows + g.tile_rows - 1) / g.tile_rows;
  const auto aligned = [](const uint8_t* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.n_segs == 1 && g.row_bytes % 16 == 0 && aligned(g.w) && (g.w2 == nullptr || aligned(g.w2))) {
    g.packed = 1;  // the region shrinks to the row: the rows of a slot are contiguous, as in memory
    g.slot_region = static_cast<int32_t>(g.row_bytes);
  }
}

int64_t attention_scratch_floats(const AttnInstr& a) {
  const int64_t group = a.n_head / a.n_head_kv, hd = a.head_dim;
  return group * hd + 2 * hd + int64_t{kConsumerWarps} * group * (hd + 2);
}

std::vector<int32_t> reduced_dependencies(const std::vector<Node>& live, size_t i, std::vector<std::vector<uint64_t>>& closure) {
  const std::vector<Range> ri = reads_of(live[i]), wi = writes_of(live[i]);
  std::vector<int32_t> kept;
  std::vector<uint64_t>& cover = closure[i];
  for (size_t j = i; j-- > 0;) {
    if ((cover[j / 64] >> (j % 64)) & 1u) continue;  // already implied by a later dependency
    const std::vector<Range> rj = reads_of(live[j]), wj = writes_of(live[j]);
    bool conflict = false;
    for (const Range& r : wj) conflict = conflict || touches(ri, r) || touches(wi, r);
    for (const Range& r : rj) conflict = conflict || touches(wi, r);
    if (!conflict) continue;
    kept.push_back(static_cast<int32_t>(j));
    cover[j / 64] |= uint64_t{1} << (j % 64);
    for (size_t w = 0; w < cover.size(); ++w) cover[w] |= closure[j][w];
  }
  return kept;
}

}  // namespace

int32_t attention_chunks(int64_t n_head_kv, int32_t grid) {
  const int64_t c = (static_cast<int64_t>(grid) + n_head_kv - 1) / std::max<int64_t>(n_head_kv, 1);
  return static_cast<int32_t>(std::clamp<int64_t>(c, 1, 64));
}

int64_t attention_partial_floats(std::span<const StepRecord> ops, int32_t grid) {
  int64_t most = 0;
  for (const StepRecord& r : ops) {
    if (const auto* a = std::get_if<rec::Attention>(&r)) {
      most = std::max(most, int64_t{attention_chunks(a->n_head_kv, grid)} * a->n_head * (a->head_dim + 2));
    }
  }
  return most;
}

Plan build_plan(std::span<const StepRecord> ops, const PlanTarget& target, float* partials) {
  GA_CHECK(target.grid > 0 && target.smem_bytes > 0, Internal, "build_plan: an empty target");
  std::vector<Node> nodes = convert(ops, target.grid, partials);
  fold_attention_merges(nodes);
  fold_residual_adds(nodes);
  fold_norms_into_readers(nodes);
  fold_glus(nodes);
  std::vector<Node> live;
  for (Node& n : nodes) {
    if (!n.dead) live.push_back(n);
  }
  GA_CHECK(!live.empty(), Unsupported, "an empty step");

  Plan plan;
  plan.grid = target.grid;
  int64_t x_floats = 0, x_int8_bytes = 0;
  int32_t rotation = 0;
  int counts[4] = {0, 0, 0, 0};
  std::vector<std::vector<uint64_t>> closure(live.size(), std::vector<uint64_t>((live.size() + 63) / 64, 0));
  for (size_t i = 0; i < live.size(); ++i) {
    Instr& in = live[i].in;
    const auto op = static_cast<size_t>(in.source_op);
    switch (in.kind) {
      case OpKind::kGemv:
        size_gemv(in.gemv, in.n_tiles, target, op);
        x_floats = std::max<int64_t>(x_floats, in.gemv.cols);
        if (in.gemv.int8_x) x_int8_bytes = std::max(x_int8_bytes, x_bytes_per_row(in.gemv));
        plan.weight_bytes += gemv_weight_bytes(in.gemv);
        break;
      case OpKind::kAttention:
        in.n_tiles = in.attn.n_head_kv * in.attn.n_chunks;
        x_floats = std::max(x_floats, attention_scratch_floats(in.attn));
        break;
      case OpKind::kRmsNorm:
        in.n_tiles = 1;
        break;
      case OpKind::kGlu:
        in.n_tiles = (in.glu.n + kGluTileCols - 1) / kGluTileCols;
        break;
    }
    ++counts[static_cast<int>(in.kind)];
    in.rotation = rotation;
    rotation = static_cast<int32_t>((rotation + in.n_tiles) % target.grid);
    const std::vector<int32_t> deps = reduced_dependencies(live, i, closure);
    in.dep_begin = static_cast<int32_t>(plan.deps.size());
    in.n_deps = static_cast<int32_t>(deps.size());
    plan.deps.insert(plan.deps.end(), deps.begin(), deps.end());
    plan.instrs.push_back(in);
  }
  plan.x_int8_offset = (x_floats * 4 + 127) / 128 * 128;
  plan.x_bytes = plan.x_int8_offset + (x_int8_bytes + 127) / 128 * 128;
  const int64_t ring = target.smem_bytes - plan.x_bytes;
  plan.n_slots = static_cast<int32_t>(std::min<int64_t>(std::clamp(target.max_slots, 2, kMaxSlots), ring / kSlotBytes));
  GA_CHECK(plan.n_slots >= 2, Unsupported, "the persistent kernel's ring needs 2 slots of ", kSlotBytes / 1024,
           " KiB beside ", plan.x_bytes / 1024, " KiB of x staging; the device gives ", target.smem_bytes / 1024,
           " KiB of shared memory");
  plan.smem_bytes = int64_t{plan.n_slots} * kSlotBytes + plan.x_bytes;
  char text[200];
  std::snprintf(text, sizeof text, "%zu instructions (%d GEMV, %d attention, %d norm, %d GLU), %d CTAs, ring %d x %d KiB",
                plan.instrs.size(), counts[0], counts[1], counts[2], counts[3], target.grid, plan.n_slots,
                kSlotBytes / 1024);
  plan.summary = text;
  return plan;
}

}  // namespace ga::cuda::persistent
