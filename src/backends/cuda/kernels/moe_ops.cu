// The small MoE kernels of moe.h and its host helpers: the plan's layout, the gated activation, the weighted
// combination, the prefill's row gather, and moe_ffn_gemv (the routed FFN of a decode step as 4 launches).
//
// Activation and combination are streams of a few MB at most (a decode step's pairs x n_ff or n_embd
// floats), so they are plain grid-stride loops over float4 (4 columns per thread, coalesced), launched
// with PDL after the kernel that wrote their input (pdl.cuh: wait, then let the next kernel launch). The
// activation uses the CPU's expression (expf / tanhf, within a few ulp of std::exp / std::tanh); the
// combine evaluates cpu::moe_combine's exact sequence of roundings (__fmul_rn / __fadd_rn: no contraction),
// so it is bit-identical to the CPU given the same rows.
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda {
namespace {

int64_t round_up4(int64_t n) { return (n + 3) / 4 * 4; }  // int32 units: 16-byte aligned sections

struct PlanLayout {  // offsets of the plan's arrays in int32 units
  int64_t counts, offsets, sorted, positions, items, total;
};

PlanLayout plan_layout(const MoeShape& s) {
  PlanLayout l;
  l.counts = 4;  // [0]: n_items
  l.offsets = l.counts + round_up4(s.n_expert);
  l.sorted = l.offsets + round_up4(s.n_expert + 1);
  l.positions = l.sorted + round_up4(s.n_pairs());
  l.items = l.positions + round_up4(s.n_pairs());
  l.total = l.items + 4 * moe_plan_max_items(s);
  return l;
}

#if defined(GA_MOE_GEMV_ALL_WIDTHS)
int pow2_at_least(int64_t n) {
  int w = 1;
  while (w < n) w *= 2;
  return w;
}
#endif

}  // namespace

const char* moe_shape_unsupported_reason(const MoeShape& s) {
  if (s.n_expert < 1 || s.n_expert > kMoeMaxExperts) return "n_expert must be 1..256";
  if (s.top_k < 1 || s.top_k > kMoeMaxTopK || s.top_k > s.n_expert) return "top_k must be 1..min(n_expert, 16)";
  if (s.n_tokens < 0) return "n_tokens must not be negative";
  if (s.n_pairs() > kMoeMaxPairs) return "n_tokens * top_k above 2^24 (split the call)";
  return nullptr;
}

// One token: its top_k experts are distinct, one pair per item. Several: 8, the widest item the GEMV is
// compiled for; with GA_MOE_GEMV_ALL_WIDTHS (items of 2 and 4 compiled too) the pairs per used expert on
// average (at most n_tokens: a token picks an expert once), doubled for the variance, as a power of two <= 8.
// moe_gemv_impl.cuh instantiates exactly these widths.
int moe_plan_item_pairs(const MoeShape& s) {
  if (s.n_tokens <= 1) return 1;
#if defined(GA_MOE_GEMV_ALL_WIDTHS)
  const int64_t used = s.n_pairs() < s.n_expert ? s.n_pairs() : s.n_expert;
  const int64_t mean = (s.n_pairs() + used - 1) / used;
  int w = pow2_at_least(2 * mean);
  const int cap = pow2_at_least(s.n_tokens);
  if (w > cap) w = cap;
  return w < 8 ? w : 8;
#else
  return 8;
#endif
}

// sum over experts of ceil(c_e / W) <= (n_pairs + (W - 1) * used experts) / W, and <= n_pairs.
int64_t moe_plan_max_items(const MoeShape& s) {
  const int64_t n = s.n_pairs();
  const int64_t w = moe_plan_item_pairs(s);
  const int64_t used = n < s.n_expert ? n : s.n_expert;
  const int64_t bound = (n + (w - 1) * used) / w;
  return bound < n ? bound : n;
}

int64_t moe_plan_bytes(const MoeShape& s) { return 4 * plan_layout(s).total; }

MoePlanView moe_plan_view(const MoeShape& s, void* plan) {
  const PlanLayout l = plan_layout(s);
  auto* base = static_cast<int32_t*>(plan);
  MoePlanView v;
  v.n_items = base;
  v.counts = base + l.counts;
  v.offsets = base + l.offsets;
  v.sorted_pairs = base + l.sorted;
  v.positions = base + l.positions;
  v.items = reinterpret_cast<int4*>(base + l.items);
  v.item_pairs = moe_plan_item_pairs(s);
  v.max_items = moe_plan_max_items(s);
  return v;
}

namespace detail {
namespace {

constexpr int kOpThreads = 256;
constexpr int64_t kOpMaxCtas = 65535;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi), as cpu::moe_gated_activation
constexpr float kGeluCubic = 0.044715f;

unsigned op_ctas(int64_t work) {
  const int64_t ctas = (work + kOpThreads - 1) / kOpThreads;
  return static_cast<unsigned>(ctas < 1 ? 1 : (ctas < kOpMaxCtas ? ctas : kOpMaxCtas));
}

// The activations as functors (DESIGN.md: variants are types): the CPU's float expressions.
struct Silu {
  static __device__ __forceinline__ float apply(float g) { return g / (1.0f + expf(-g)); }
};
struct GeluTanh {
  static __device__ __forceinline__ float apply(float g) {
    const float inner = kSqrt2OverPi * (g + kGeluCubic * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner));
  }
};

template <class Act>
__global__ void __launch_bounds__(kOpThreads) activate_kernel(const MoeActivateParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t per_row = p.n / 4;  // float4 groups (moe_activate checks n % 4 and the alignment)
  const int64_t total = p.n_rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kOpThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kOpThreads) {
    const int64_t r = i / per_row;
    const int64_t c = 4 * (i - r * per_row);
    const float4 g = *reinterpret_cast<const float4*>(p.gate_up + r * p.ld_in + c);
    const float4 u = *reinterpret_cast<const float4*>(p.gate_up + r * p.ld_in + p.n + c);
    const float4 o = make_float4(Act::apply(g.x) * u.x, Act::apply(g.y) * u.y, Act::apply(g.z) * u.z,
                                 Act::apply(g.w) * u.w);
    *reinterpret_cast<float4*>(p.out + r * p.ld_out + c) = o;
  }
}

__global__ void __launch_bounds__(kOpThreads) combine_kernel(const MoeCombineParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t per_row = p.n / 4;
  const int64_t total = p.n_tokens * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kOpThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kOpThreads) {
    const int64_t t = i / per_row;
    const int64_t c = 4 * (i - t * per_row);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < p.top_k; ++j) {
      const int64_t pair = t * p.top_k + j;
      const int32_t e = p.ids[pair];
      if (e < 0 || e >= p.n_expert) continue;
      const float w = p.weights[pair];
      const int64_t row = p.y_rows != nullptr ? p.y_rows[pair] : pair;
      const float4 y = *reinterpret_cast<const float4*>(p.y + row * p.ldy + c);
      acc.x = __fadd_rn(acc.x, __fmul_rn(w, y.x));
      acc.y = __fadd_rn(acc.y, __fmul_rn(w, y.y));
      acc.z = __fadd_rn(acc.z, __fmul_rn(w, y.z));
      acc.w = __fadd_rn(acc.w, __fmul_rn(w, y.w));
    }
    float4* out = reinterpret_cast<float4*>(p.out + t * p.ld_out + c);
    if (p.accumulate) {
      const float4 o = *out;
      acc = make_float4(__fadd_rn(o.x, acc.x), __fadd_rn(o.y, acc.y), __fadd_rn(o.z, acc.z), __fadd_rn(o.w, acc.w));
    }
    *out = acc;
  }
}

__global__ void __launch_bounds__(kOpThreads) gather_f16_kernel(const MoeGatherParams p, const MoePlanView plan) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t per_row = p.n / 4;
  const int64_t total = static_cast<int64_t>(plan.offsets[p.shape.n_expert]) * per_row;  // valid pairs
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kOpThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kOpThreads) {
    const int64_t r = i / per_row;
    const int64_t c = 4 * (i - r * per_row);
    const int64_t token = plan.sorted_pairs[r] / p.shape.top_k;
    const float4 v = *reinterpret_cast<const float4*>(p.x + token * p.ldx + c);
    __half2* dst = reinterpret_cast<__half2*>(static_cast<__half*>(p.dst_f16) + r * p.ld_dst + c);
    dst[0] = __floats2half2_rn(v.x, v.y);
    dst[1] = __floats2half2_rn(v.z, v.w);
  }
}

bool misaligned(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; }

}  // namespace
}  // namespace detail

const char* moe_activate_unsupported_reason(const MoeActivateParams& p) {
  if (p.gate_up == nullptr || p.out == nullptr) return "gate_up and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0 || p.n % 4 != 0) return "n must be a positive multiple of 4 (float4 rows)";
  if (p.ld_in < 2 * p.n || p.ld_out < p.n) return "ld_in < 2 n or ld_out < n";
  if (p.ld_in % 4 != 0 || p.ld_out % 4 != 0 || detail::misaligned(p.gate_up) || detail::misaligned(p.out)) {
    return "gate_up and out must be 16-byte aligned with row strides a multiple of 4";
  }
  if (p.act != MoeActivation::kSilu && p.act != MoeActivation::kGeluTanh) return "unknown activation";
  return nullptr;
}

cudaError_t moe_activate(const MoeActivateParams& p, cudaStream_t stream) {
  if (moe_activate_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t work = p.n_rows * p.n / 4;
  if (work == 0) return cudaSuccess;
  const dim3 grid(detail::op_ctas(work)), block(detail::kOpThreads);
  if (p.act == MoeActivation::kSilu) return detail::launch_after_prior(detail::activate_kernel<detail::Silu>, grid, block, 0, stream, p);
  return detail::launch_after_prior(detail::activate_kernel<detail::GeluTanh>, grid, block, 0, stream, p);
}

const char* moe_combine_unsupported_reason(const MoeCombineParams& p) {
  if (p.ids == nullptr || p.weights == nullptr || p.y == nullptr || p.out == nullptr) {
    return "ids, weights, y and out must be device pointers";
  }
  if (p.n_tokens < 0 || p.top_k < 1 || p.n_expert < 1) return "n_tokens, top_k or n_expert out of range";
  if (p.n <= 0 || p.n % 4 != 0) return "n must be a positive multiple of 4 (float4 rows)";
  if (p.ldy < p.n || p.ld_out < p.n || p.ldy % 4 != 0 || p.ld_out % 4 != 0) {
    return "ldy and ld_out must be >= n and multiples of 4";
  }
  if (detail::misaligned(p.y) || detail::misaligned(p.out)) return "y and out must be 16-byte aligned";
  return nullptr;
}

cudaError_t moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (moe_combine_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t work = p.n_tokens * p.n / 4;
  if (work == 0) return cudaSuccess;
  return detail::launch_after_prior(detail::combine_kernel, dim3(detail::op_ctas(work)), dim3(detail::kOpThreads), 0,
                                    stream, p);
}

cudaError_t moe_gather_rows_f16(const MoeGatherParams& p, cudaStream_t stream) {
  if (moe_shape_unsupported_reason(p.shape) != nullptr || p.plan == nullptr || p.x == nullptr ||
      p.dst_f16 == nullptr || p.n <= 0 || p.n % 4 != 0 || p.ldx % 4 != 0 || p.ld_dst % 4 != 0 ||
      p.ldx < p.n || p.ld_dst < p.n || detail::misaligned(p.x) || reinterpret_cast<uintptr_t>(p.dst_f16) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t work = p.shape.n_pairs() * p.n / 4;
  if (work == 0) return cudaSuccess;
  return detail::launch_after_prior(detail::gather_f16_kernel, dim3(detail::op_ctas(work)), dim3(detail::kOpThreads),
                                    0, stream, p, moe_plan_view(p.shape, const_cast<void*>(p.plan)));
}

// ---- moe_ffn_gemv: gate|up GEMV, activation in place, down GEMV, combine ----

namespace {

struct FfnScratch {  // float offsets into the workspace
  int64_t gate_up, down, total;
};

FfnScratch ffn_scratch(const MoeShape& s, int64_t n_embd, int64_t n_ff) {
  const int64_t pairs = s.n_pairs();
  FfnScratch f;
  f.gate_up = 0;  // [n_pairs][2 n_ff]; the activation overwrites the gate half
  f.down = f.gate_up + round_up4(pairs * 2 * n_ff);  // [n_pairs][n_embd]
  f.total = f.down + round_up4(pairs * n_embd);
  return f;
}

}  // namespace

int64_t moe_ffn_gemv_workspace_bytes(const MoeShape& s, int64_t n_embd, int64_t n_ff) {
  return 4 * ffn_scratch(s, n_embd, n_ff).total;
}

namespace {

MoeGemvParams gate_up_params(const MoeFfnGemvParams& p, float* gate_up) {
  MoeGemvParams g;
  g.shape = p.shape;
  g.plan = p.plan;
  g.w = p.gate;
  g.w2 = p.up.data;
  g.x = p.x;
  g.ldx = p.ldx;
  g.input = MoeGemvInput::kTokenRows;
  g.y = gate_up;
  g.ldy = 2 * p.gate.rows;
  return g;
}

MoeGemvParams down_params(const MoeFfnGemvParams& p, const float* act, float* down) {
  MoeGemvParams d;
  d.shape = p.shape;
  d.plan = p.plan;
  d.w = p.down;
  d.x = act;
  d.ldx = 2 * p.gate.rows;
  d.input = MoeGemvInput::kPairRows;
  d.y = down;
  d.ldy = p.down.rows;
  return d;
}

MoeCombineParams combine_params(const MoeFfnGemvParams& p, const float* down) {
  MoeCombineParams c;
  c.n_tokens = p.shape.n_tokens;
  c.top_k = p.shape.top_k;
  c.n_expert = p.shape.n_expert;
  c.ids = p.ids;
  c.weights = p.weights;
  c.y = down;
  c.ldy = p.down.rows;
  c.n = p.down.rows;
  c.out = p.out;
  c.ld_out = p.ld_out;
  c.accumulate = p.accumulate;
  return c;
}

}  // namespace

const char* moe_ffn_gemv_unsupported_reason(const MoeFfnGemvParams& p) {
  if (p.workspace == nullptr || detail::misaligned(p.workspace)) return "the workspace must be set, 16-byte aligned";
  if (p.up.type != p.gate.type || p.up.rows != p.gate.rows || p.up.cols != p.gate.cols ||
      p.up.row_stride != p.gate.row_stride || p.up.expert_stride != p.gate.expert_stride) {
    return "gate and up stacks must have the same type, shape and strides";
  }
  if (p.down.rows != p.gate.cols || p.down.cols != p.gate.rows) return "down must be [n_embd][n_ff] for gate [n_ff][n_embd]";
  float* ws = static_cast<float*>(p.workspace);
  const FfnScratch f = ffn_scratch(p.shape, p.gate.cols, p.gate.rows);
  if (const char* why = moe_gemv_unsupported_reason(gate_up_params(p, ws + f.gate_up))) return why;
  if (const char* why = moe_gemv_unsupported_reason(down_params(p, ws + f.gate_up, ws + f.down))) return why;
  MoeActivateParams a{ws + f.gate_up, 2 * p.gate.rows, ws + f.gate_up, 2 * p.gate.rows, p.shape.n_pairs(), p.gate.rows, p.act};
  if (const char* why = moe_activate_unsupported_reason(a)) return why;
  return moe_combine_unsupported_reason(combine_params(p, ws + f.down));
}

cudaError_t moe_ffn_gemv(const MoeFfnGemvParams& p, cudaStream_t stream) {
  if (moe_ffn_gemv_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(p.workspace);
  const FfnScratch f = ffn_scratch(p.shape, p.gate.cols, p.gate.rows);
  cudaError_t status = moe_gemv(gate_up_params(p, ws + f.gate_up), stream);
  if (status != cudaSuccess) return status;
  const MoeActivateParams a{ws + f.gate_up, 2 * p.gate.rows, ws + f.gate_up, 2 * p.gate.rows, p.shape.n_pairs(),
                            p.gate.rows, p.act};
  if ((status = moe_activate(a, stream)) != cudaSuccess) return status;
  if ((status = moe_gemv(down_params(p, ws + f.gate_up, ws + f.down), stream)) != cudaSuccess) return status;
  return moe_combine(combine_params(p, ws + f.down), stream);
}

}  // namespace ga::cuda
