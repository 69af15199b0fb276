// The recurrent kernels of recurrent.h. Recurrences accumulate in float in the CPU reference's order over a
// head's channels, except wkv7's: its per-head norms and dot products are tree reductions and its row sums four
// interleaved partial sums (rounding far below the 1e-2 bar).
#include <cmath>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/recurrent.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kMaxHeadSize = 64;
constexpr float kMinusInf = -1e30f;  // wkv4's running maximum at the start (rwkv.cpp's state init)

struct Run {
  int64_t begin = 0, end = 0;
  bool fresh = false;   // starts at position 0: the initial state, not the slot's
  float* state = nullptr;  // this op's floats of the run's slot
};

__device__ __forceinline__ Run run_at(const RecurrentRuns& r, int s) {
  Run run;
  run.begin = r.q_start != nullptr ? r.q_start[s] : 0;
  run.end = r.q_start != nullptr ? r.q_start[s + 1] : r.n_rows;
  run.fresh = r.pos0[s] == 0;
  run.state = r.state + static_cast<int64_t>(r.slot != nullptr ? r.slot[s] : 0) * r.slot_floats + r.offset;
  return run;
}

// The run holding row t: the last s with q_start[s] <= t.
__device__ __forceinline__ int run_of_row(const RecurrentRuns& r, int64_t t) {
  if (r.q_start == nullptr) return 0;
  int lo = 0, hi = r.n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (r.q_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

constexpr int kShiftThreads = 256;

// blockIdx.x = row, blockIdx.y = 256 columns.
__global__ void __launch_bounds__(kShiftThreads)
    token_shift_kernel(const RecurrentRuns runs, const float* x, int64_t ldx, float* prev, int64_t ld_prev, int64_t n) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kShiftThreads + threadIdx.x;
  if (c >= n) return;
  const Run run = run_at(runs, run_of_row(runs, t));
  if (t != run.begin) {
    prev[t * ld_prev + c] = x[(t - 1) * ldx + c];
    return;
  }
  // The run's first row is the only reader and the only writer of the slot's column c.
  prev[t * ld_prev + c] = run.fresh ? 0.0f : run.state[c];
  run.state[c] = x[(run.end - 1) * ldx + c];
}

constexpr int kWkv4Threads = 128;

// blockIdx.x = run, blockIdx.y = 128 channels; a thread walks its channel through the run's rows.
__global__ void __launch_bounds__(kWkv4Threads) wkv4_kernel(const Wkv4Params p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kWkv4Threads + threadIdx.x;
  if (c >= p.n) return;
  const Run run = run_at(p.runs, static_cast<int>(blockIdx.x));
  float* aa_s = run.state;
  float* bb_s = run.state + p.n;
  float* pp_s = run.state + 2 * p.n;
  float aa = run.fresh ? 0.0f : aa_s[c];
  float bb = run.fresh ? 0.0f : bb_s[c];
  float pp = run.fresh ? kMinusInf : pp_s[c];
  const float u = p.time_first[c];
  const float w = p.time_decay[c];
  for (int64_t t = run.begin; t < run.end; ++t) {
    const float k = p.k[t * p.ldk + c];
    const float v = p.v[t * p.ldv + c];
    float ww = u + k;
    float q = fmaxf(pp, ww);
    float e1 = expf(pp - q);
    float e2 = expf(ww - q);
    const float a = e1 * aa + e2 * v;
    const float b = e1 * bb + e2;
    ww = pp + w;
    q = fmaxf(ww, k);
    e1 = expf(ww - q);
    e2 = expf(k - q);
    aa = e1 * aa + e2 * v;
    bb = e1 * bb + e2;
    pp = q;
    p.out[t * p.ld_out + c] = a / b;
  }
  aa_s[c] = aa;
  bb_s[c] = bb;
  pp_s[c] = pp;
}

// blockIdx.x = run, blockIdx.y = head; thread j owns value channel j (column j of S[i][j]).
__global__ void __launch_bounds__(kMaxHeadSize) wkv5_kernel(const Wkv5Params p) {
  extern __shared__ float smem[];
  const int S = static_cast<int>(p.head_size);
  float* st = smem;  // [S][S]: key channel i, value channel j
  float* rs = st + S * S;
  float* ks = rs + S;
  float* us = ks + S;
  float* ws = us + S;
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int j = static_cast<int>(threadIdx.x);
  const int64_t h = blockIdx.y;
  const Run run = run_at(p.runs, static_cast<int>(blockIdx.x));
  float* global_state = run.state + h * S * S;
  for (int idx = j; idx < S * S; idx += static_cast<int>(blockDim.x)) st[idx] = run.fresh ? 0.0f : global_state[idx];
  if (j < S) {
    us[j] = p.time_first[p.u_per_head ? h : h * S + j];
    if (p.decay_rows == nullptr) ws[j] = p.decay[p.w_per_head ? h : h * S + j];
  }
  __syncthreads();
  for (int64_t t = run.begin; t < run.end; ++t) {
    const int64_t c = h * S + j;
    if (j < S) {
      rs[j] = p.r[t * p.ldr + c];
      ks[j] = p.k[t * p.ldk + c];
      if (p.decay_rows != nullptr) ws[j] = p.decay_rows[t * p.ld_decay + c];
    }
    __syncthreads();
    if (j < S) {
      const float vj = p.v[t * p.ldv + c];
      float acc = 0.0f;
      for (int i = 0; i < S; ++i) {
        const float kv = ks[i] * vj;
        const float s = st[i * S + j];
        acc += rs[i] * (us[i] * kv + s);
        st[i * S + j] = s * ws[i] + kv;
      }
      p.out[t * p.ld_out + c] = acc;
    }
    __syncthreads();  // rs / ks / ws are rewritten by the next row
  }
  for (int idx = j; idx < S * S; idx += static_cast<int>(blockDim.x)) global_state[idx] = st[idx];
}

// The inputs of one wkv7 token for one lane: key channels lane and lane + 32 (j0, j1) of k, a, r and w, and the
// lane's own value channel of v.
struct Wkv7Token {
  float k0 = 0, k1 = 0, a0 = 0, a1 = 0, r0 = 0, r1 = 0, w0 = 0, w1 = 0, v = 0;
};

__device__ __forceinline__ Wkv7Token wkv7_token(const Wkv7Params& p, int64_t t, int64_t j0, bool has0, bool has1,
                                                int64_t c, bool own) {
  Wkv7Token x;
  if (has0) {
    x.k0 = p.k[t * p.ldk + j0];
    x.a0 = p.a[t * p.lda + j0];
    x.r0 = p.r[t * p.ldr + j0];
    x.w0 = p.w[t * p.ldw + j0];
  }
  if (has1) {
    x.k1 = p.k[t * p.ldk + j0 + 32];
    x.a1 = p.a[t * p.lda + j0 + 32];
    x.r1 = p.r[t * p.ldr + j0 + 32];
    x.w1 = p.w[t * p.ldw + j0 + 32];
  }
  if (own) x.v = p.v[t * p.ldv + c];
  return x;
}

// blockIdx.x = run, blockIdx.y = head, blockIdx.z = which 32 of the head's value channels; one warp per CTA. Lane l
// owns value channel i = 32 z + l, and row i of the state S[i][j] lives in its registers. Each warp computes the
// head's per-token vectors over all key channels itself (kk normalized, k', kk * a, r, w: two channels per lane,
// shuffle reductions for the norm and for the bonus's r.k' sum), so no warp ever waits for another: a token costs
// two warp reductions and one __syncwarp (the vectors are double-buffered by token parity). The next token's
// inputs are loaded while the current one computes, so the serial walk over a run's tokens does not wait on
// global memory each step.
__global__ void __launch_bounds__(32) wkv7_kernel(const Wkv7Params p) {
  constexpr int kVecs = 5;  // kk, k', kk * a, r, w
  __shared__ __align__(16) float vec_s[2][kVecs][kMaxHeadSize];
  const int S = static_cast<int>(p.head_size);
  const int lane = static_cast<int>(threadIdx.x);
  const int i = static_cast<int>(blockIdx.z) * 32 + lane;
  const bool own = i < S, has0 = lane < S, has1 = lane + 32 < S;
  const int64_t h = blockIdx.y;
  const int64_t j0 = h * S + lane;
  const int64_t c = h * S + i;
  // Key channels at and past S stay 0 in both buffers, so the register row's tail stays 0 and adds nothing.
  for (int idx = lane; idx < 2 * kVecs * kMaxHeadSize; idx += 32) (&vec_s[0][0][0])[idx] = 0.0f;
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const Run run = run_at(p.runs, static_cast<int>(blockIdx.x));
  float* global_row = run.state + h * S * S + static_cast<int64_t>(i) * S;
  float row[kMaxHeadSize];
#pragma unroll
  for (int j = 0; j < kMaxHeadSize; ++j) row[j] = (own && !run.fresh && j < S) ? global_row[j] : 0.0f;
  const float kk0 = has0 ? p.k_k[j0] : 0.0f, kk1 = has1 ? p.k_k[j0 + 32] : 0.0f;
  const float ka0 = has0 ? p.k_a[j0] : 0.0f, ka1 = has1 ? p.k_a[j0 + 32] : 0.0f;
  const float rk0 = has0 ? p.r_k[j0] : 0.0f, rk1 = has1 ? p.r_k[j0 + 32] : 0.0f;
  Wkv7Token cur;
  if (run.begin < run.end) cur = wkv7_token(p, run.begin, j0, has0, has1, c, own);
  for (int64_t t = run.begin; t < run.end; ++t) {
    Wkv7Token next;
    if (t + 1 < run.end) next = wkv7_token(p, t + 1, j0, has0, has1, c, own);
    float q0 = cur.k0 * kk0, q1 = cur.k1 * kk1;
    const float inv_norm = 1.0f / fmaxf(sqrtf(warp_sum(q0 * q0 + q1 * q1)), 1e-12f);
    q0 *= inv_norm;
    q1 *= inv_norm;
    const float a_k0 = cur.k0 * ka0, a_k1 = cur.k1 * ka1;
    const float kp0 = cur.k0 + (cur.a0 * a_k0 - a_k0), kp1 = cur.k1 + (cur.a1 * a_k1 - a_k1);
    const float rkr = warp_sum(kp0 * cur.r0 * rk0 + kp1 * cur.r1 * rk1);
    float(*vec)[kMaxHeadSize] = vec_s[t & 1];
    if (has0) {
      vec[0][lane] = q0;
      vec[1][lane] = kp0;
      vec[2][lane] = q0 * cur.a0;
      vec[3][lane] = cur.r0;
      vec[4][lane] = cur.w0;
    }
    if (has1) {
      vec[0][lane + 32] = q1;
      vec[1][lane + 32] = kp1;
      vec[2][lane + 32] = q1 * cur.a1;
      vec[3][lane + 32] = cur.r1;
      vec[4][lane + 32] = cur.w1;
    }
    __syncwarp();  // also: every lane is past its reads of this parity's previous token
    const float4* kk4 = reinterpret_cast<const float4*>(vec[0]);
    const float4* kp4 = reinterpret_cast<const float4*>(vec[1]);
    const float4* bb4 = reinterpret_cast<const float4*>(vec[2]);
    const float4* r4 = reinterpret_cast<const float4*>(vec[3]);
    const float4* w4 = reinterpret_cast<const float4*>(vec[4]);
    float sa0 = 0.0f, sa1 = 0.0f, sa2 = 0.0f, sa3 = 0.0f;
#pragma unroll
    for (int q = 0; q < kMaxHeadSize / 4; ++q) {
      const float4 kk = kk4[q];
      sa0 -= kk.x * row[4 * q];
      sa1 -= kk.y * row[4 * q + 1];
      sa2 -= kk.z * row[4 * q + 2];
      sa3 -= kk.w * row[4 * q + 3];
    }
    const float sa = (sa0 + sa1) + (sa2 + sa3);
    const float vi = cur.v;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
#pragma unroll
    for (int q = 0; q < kMaxHeadSize / 4; ++q) {
      const float4 w = w4[q], kp = kp4[q], bb = bb4[q], r = r4[q];
      row[4 * q] = row[4 * q] * w.x + vi * kp.x + sa * bb.x;
      row[4 * q + 1] = row[4 * q + 1] * w.y + vi * kp.y + sa * bb.y;
      row[4 * q + 2] = row[4 * q + 2] * w.z + vi * kp.z + sa * bb.z;
      row[4 * q + 3] = row[4 * q + 3] * w.w + vi * kp.w + sa * bb.w;
      acc0 += row[4 * q] * r.x;
      acc1 += row[4 * q + 1] * r.y;
      acc2 += row[4 * q + 2] * r.z;
      acc3 += row[4 * q + 3] * r.w;
    }
    if (own) {
      p.out[t * p.ld_out + c] = (acc0 + acc1) + (acc2 + acc3);
      p.bonus[t * p.ld_bonus + c] = vi * rkr;
    }
    cur = next;
  }
  if (own) {
#pragma unroll
    for (int j = 0; j < kMaxHeadSize; ++j) {
      if (j < S) global_row[j] = row[j];
    }
  }
}

unsigned head_threads(int64_t head_size) { return static_cast<unsigned>((head_size + 31) / 32 * 32); }

const char* head_shape_reason(const RecurrentRuns& runs, int64_t n_head, int64_t head_size) {
  if (const char* why = recurrent_runs_unsupported_reason(runs)) return why;
  if (n_head <= 0 || n_head > 65535) return "n_head must be in [1, 65535]";
  if (head_size <= 0 || head_size > kMaxHeadSize) return "head_size must be in [1, 64]";
  return nullptr;
}

bool strides_cover(int64_t n_rows, int64_t n, std::initializer_list<int64_t> lds) {
  if (n_rows <= 1) return true;
  for (const int64_t ld : lds) {
    if (ld < n) return false;
  }
  return true;
}

}  // namespace
}  // namespace detail

const char* recurrent_runs_unsupported_reason(const RecurrentRuns& r) {
  if (r.pos0 == nullptr || r.state == nullptr) return "the runs need their first positions and the state pool";
  if (r.n_seqs < 1) return "a step has at least one run";
  if (r.q_start == nullptr && r.n_seqs != 1) return "without run starts the step is one run";
  if (r.n_rows < 1 || r.n_rows > 0x7fffffff) return "n_rows must be in [1, 2^31)";
  if (r.offset < 0 || r.slot_floats <= 0) return "state offsets must be non-negative and slots non-empty";
  return nullptr;
}

cudaError_t token_shift(const RecurrentRuns& runs, const float* x, int64_t ldx, float* prev, int64_t ld_prev,
                        int64_t n, cudaStream_t stream) {
  if (recurrent_runs_unsupported_reason(runs) != nullptr || x == nullptr || prev == nullptr || n <= 0 ||
      !detail::strides_cover(runs.n_rows, n, {ldx, ld_prev}) || n > int64_t{65535} * detail::kShiftThreads) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(runs.n_rows),
                  static_cast<unsigned>((n + detail::kShiftThreads - 1) / detail::kShiftThreads));
  return detail::launch_after_prior(detail::token_shift_kernel, grid, dim3(detail::kShiftThreads), 0, stream, runs, x,
                                    ldx, prev, ld_prev, n);
}

const char* wkv4_unsupported_reason(const Wkv4Params& p) {
  if (const char* why = recurrent_runs_unsupported_reason(p.runs)) return why;
  if (p.k == nullptr || p.v == nullptr || p.out == nullptr || p.time_first == nullptr || p.time_decay == nullptr) {
    return "k, v, out, time_first and time_decay must be device pointers";
  }
  if (p.n <= 0 || p.n > int64_t{65535} * detail::kWkv4Threads) return "channel count outside [1, 65535 * 128]";
  if (!detail::strides_cover(p.runs.n_rows, p.n, {p.ldk, p.ldv, p.ld_out})) return "a row stride is shorter than a row";
  return nullptr;
}

cudaError_t wkv4(const Wkv4Params& p, cudaStream_t stream) {
  if (wkv4_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.runs.n_seqs),
                  static_cast<unsigned>((p.n + detail::kWkv4Threads - 1) / detail::kWkv4Threads));
  return detail::launch_after_prior(detail::wkv4_kernel, grid, dim3(detail::kWkv4Threads), 0, stream, p);
}

const char* wkv5_unsupported_reason(const Wkv5Params& p) {
  if (const char* why = detail::head_shape_reason(p.runs, p.n_head, p.head_size)) return why;
  if (p.r == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr || p.time_first == nullptr ||
      (p.decay == nullptr && p.decay_rows == nullptr)) {
    return "r, k, v, out, time_first and a decay must be device pointers";
  }
  const int64_t C = p.n_head * p.head_size;
  if (!detail::strides_cover(p.runs.n_rows, C, {p.ldr, p.ldk, p.ldv, p.ld_out}) ||
      (p.decay_rows != nullptr && !detail::strides_cover(p.runs.n_rows, C, {p.ld_decay}))) {
    return "a row stride is shorter than a row";
  }
  return nullptr;
}

cudaError_t wkv5(const Wkv5Params& p, cudaStream_t stream) {
  if (wkv5_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(p.head_size * p.head_size + 4 * p.head_size) * sizeof(float);
  return detail::launch_after_prior(detail::wkv5_kernel,
                                    dim3(static_cast<unsigned>(p.runs.n_seqs), static_cast<unsigned>(p.n_head)),
                                    dim3(detail::head_threads(p.head_size)), smem, stream, p);
}

const char* wkv7_unsupported_reason(const Wkv7Params& p) {
  if (const char* why = detail::head_shape_reason(p.runs, p.n_head, p.head_size)) return why;
  if (p.r == nullptr || p.w == nullptr || p.k == nullptr || p.v == nullptr || p.a == nullptr || p.k_k == nullptr ||
      p.k_a == nullptr || p.r_k == nullptr || p.out == nullptr || p.bonus == nullptr) {
    return "r, w, k, v, a, k_k, k_a, r_k, out and bonus must be device pointers";
  }
  const int64_t C = p.n_head * p.head_size;
  if (!detail::strides_cover(p.runs.n_rows, C, {p.ldr, p.ldw, p.ldk, p.ldv, p.lda, p.ld_out, p.ld_bonus})) {
    return "a row stride is shorter than a row";
  }
  return nullptr;
}

cudaError_t wkv7(const Wkv7Params& p, cudaStream_t stream) {
  if (wkv7_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  return detail::launch_after_prior(detail::wkv7_kernel,
                                    dim3(static_cast<unsigned>(p.runs.n_seqs), static_cast<unsigned>(p.n_head),
                                         static_cast<unsigned>((p.head_size + 31) / 32)),
                                    dim3(32), 0, stream, p);
}

}  // namespace ga::cuda
