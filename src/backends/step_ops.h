// The step op vocabulary: the seam between an architecture's forward pass and the backend that runs it.
//
// An architecture (model/arch/) writes its forward ONCE, as a Program that calls the ops below in order;
// every backend (backends/cpu: the reference, threaded on the host; backends/cuda: kernels enqueued on a
// stream, captured as CUDA graphs) implements the ops. Nothing here names an architecture, a file format or
// a device: the handles are small integers the backend hands out, the activations are views of buffers the
// backend owns, and the step's tokens, positions and sequences are the backend's business (the Program sees
// only "the rows of this step").
//
// Life of a Program (llama.cpp's per-arch graph builders over one op set; FlashInfer's plan/run split):
//   1. the backend asks the ProgramFactory what per-sequence state the model needs (state()) and which
//      tensors it may upload back to back (weight_groups(): q/k/v, gate/up), sizes its pools and uploads;
//   2. build(binder): the Program resolves tensor names to handles, asks for its activation buffers and
//      RoPE tables, and keeps them; nothing is allocated per step after this;
//   3. run(ops), once per step (and once per captured CUDA graph): the ops read the step's rows.
//
// Conventions: activations are f32 rows, one per token of the step, [n_tokens][cols] within a buffer of
// max_step_tokens() rows; a View is a range of columns of every row. Ops never allocate. Shapes are checked
// by the backend when the Program is built or at the op (an error names the op), never silently clipped.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/error.h"

namespace ga::step {

// One entry of a batched step: `token` at position `pos` of sequence `seq` (an index into the step's
// block tables). The entries of one sequence are consecutive and at consecutive positions (a run: one
// decode token or a prompt chunk).
struct BatchToken {
  int32_t token = 0;
  int64_t pos = 0;
  int32_t seq = 0;
  bool logits = false;  // write this entry's logits
};

// ---- handles (indices into the backend's tables; -1: none) ----
struct Weight {  // a matrix (2-D) or a stack of expert matrices (3-D), in its stored type
  int32_t id = -1;
  explicit operator bool() const { return id >= 0; }
};
struct Vec {  // a 1-D parameter held as f32 (norm weights, biases)
  int32_t id = -1;
  explicit operator bool() const { return id >= 0; }
};
struct Buf {  // an activation buffer of [max_step_tokens][cols] f32
  int32_t id = -1;
  explicit operator bool() const { return id >= 0; }
};
struct Rope {  // a RoPE table (below)
  int32_t id = -1;
};
struct Kv {  // one attention layer's K/V in the sequences' pages
  int32_t id = -1;
};
struct Rec {  // one recurrent state slot of every sequence (StateSpec::recurrent)
  int32_t id = -1;
};

// Columns [col, col + cols) of every row of a buffer.
struct View {
  Buf buf;
  int64_t col = 0;
  int64_t cols = 0;
  explicit operator bool() const { return static_cast<bool>(buf); }
  View slice(int64_t c0, int64_t n) const { return View{buf, col + c0, n}; }
};

enum class Activation {
  kSilu,      // x * sigmoid(x): SwiGLU (Llama, Qwen, Mistral, Phi-3, the MoE experts)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GeGLU (Gemma's gelu_pytorch_tanh)
};

// A RoPE of one kind of layer, as the frequencies it turns each pair by: pair i of a token at position p
// turns by p * inv_freq[i], and the rotated q and k are multiplied by mscale (YaRN's and LongRoPE's
// attention factor; 1 otherwise). Every scaling scheme (linear, Llama 3, YaRN, LongRoPE) is a different
// table, computed once by the architecture (model/arch/rope.h); the backends only rotate.
struct RopeTable {
  int64_t n_rot = 0;              // rotated dims per head (even, <= head_dim); the rest pass through
  bool neox = false;              // pairs (i, i + n_rot/2) (NeoX, HF rotate_half) instead of (2i, 2i+1)
  std::vector<double> inv_freq;   // [n_rot / 2]
  float mscale = 1.0f;
};

// What a sequence carries from step to step.
struct KvLayerSpec {
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_head = 0;  // query heads that read it (sizes a backend's attention workspace)
};
// A recurrent layer's fixed-size state (RWKV's token-shift vectors and WKV states): `floats` f32 values per
// sequence, whatever its length. The backend keeps a sequence's slots with its pages (the CPU pool: beside
// the sequence's first block); a step whose run of a sequence starts at position 0 starts from the initial
// state (zeros; wkv4's running maximum -1e30), any other run continues the state where the last one ended
// (a recurrent state cannot go back: a run that does not start where the state stands is refused).
struct RecurrentSpec {
  int64_t floats = 0;
};
// One sequence's recurrent state copied out of a backend's pool: every recurrent slot's floats back to back
// (StateSpec::recurrent's order) and the position the state stands at (how many tokens it has read). The
// Scheduler's prompt-state cache keeps these and puts one back into a new sequence whose prompt starts with
// the same tokens (BatchBackend::save_recurrent_state / restore_recurrent_state).
struct RecurrentSnapshot {
  int64_t pos = 0;
  std::vector<float> floats;
};
struct StateSpec {
  // Attention layers: K/V of every position in pages (blocks) of the shared pool, one entry per layer
  // that has its own K/V, in the order Binder::kv() numbers them.
  std::vector<KvLayerSpec> kv_layers;
  // Recurrent slots, in the order Binder::recurrent() numbers them.
  std::vector<RecurrentSpec> recurrent;
};

// ---- the ops' parameters ----

// out = rmsnorm(v) * weight, v = x, or, with `residual`, residual += x first and v = residual (the skip
// connection and the next block's norm in one pass). `next`: the matrices that will read `out` (a hint:
// a backend may prepare their input once, e.g. the CUDA int8 GEMV's rounded activations).
struct RmsNormOp {
  View x;
  View residual;
  Vec weight;
  View out;
  float eps = 1e-5f;
  std::array<Weight, 3> next{};
};

// Per-head RMSNorm in place (Qwen3's and Gemma 3's q_norm / k_norm): each head_dim slice of x and, when
// set, of x2 is normalized and multiplied by weight (weight2) of [head_dim].
struct HeadNormOp {
  View x;
  Vec weight;
  View x2;
  Vec weight2;
  int64_t head_dim = 0;
  float eps = 1e-6f;
};

// The step between the projections and the attention: q += bq and rope(q) in place; the layer's cache
// rows of this step's positions get rope(k + bk) and v + bv. Biases are all set or all none.
struct RopeKvOp {
  View q, k, v;
  Vec bq, bk, bv;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  Rope rope;
  Kv kv;
};

// out = softmax(cap(scale * q.k) + mask) v over the sequence's cached positions (causal: a token sees its
// own position and the ones before it; with window_left >= 0 only the window_left positions before it).
// cap(s) = softcap * tanh(s / softcap) when softcap > 0. Query head h reads KV head h / (n_head / n_head_kv).
struct AttentionOp {
  View q;
  View out;
  Kv kv;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  int64_t window_left = -1;  // -1: the whole context
  float softcap = 0.0f;
};

// out = act(gate) * up (element-wise; out may alias gate). `next`: the matrix that reads out (hint).
struct GluOp {
  View gate, up, out;
  Activation act = Activation::kSilu;
  Weight next;
};

// A mixture-of-experts feed-forward: router logits = router * x, p = softmax over the experts, the top_k
// experts by p (ties: lower index), weights p_k (divided by their sum when normalize_top_k), and
// out = sum_k w_k * down_k(act(gate_k x) * up_k x). gate/up/down are 3-D expert stacks (GGUF's
// ffn_*_exps: expert e's matrix is the e-th block of rows).
struct MoeOp {
  View x;
  View out;
  Weight router;
  Weight gate_exps, up_exps, down_exps;
  int64_t n_expert = 0;
  int64_t top_k = 0;
  bool normalize_top_k = true;
  Activation act = Activation::kSilu;
};

// The end of the forward for the rows that want logits: v = rmsnorm(residual += x) * norm (with norm_bias:
// v = layernorm(residual += x) * norm + norm_bias, RWKV's ln_out), then
// logits = output * v, then logits = softcap * tanh(logits / softcap) when softcap > 0.
struct LogitsOp {
  View x;
  View residual;
  Vec norm;
  Vec norm_bias;
  float eps = 1e-5f;
  Weight output;
  float softcap = 0.0f;
};

// ---- recurrent (RWKV) ops. Rows of one sequence are consecutive in the step (BatchToken's contract), so
// the recurrences run row by row inside each sequence's run; everything else is row-independent. ----

// out = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, per row (out may alias x).
struct LayerNormOp {
  View x;
  Vec weight, bias;
  View out;
  float eps = 1e-5f;
};

// The same per group of x.cols / groups columns, in place; weight and bias span all columns (RWKV's ln_x).
struct GroupNormOp {
  View x;
  Vec weight, bias;
  int64_t groups = 1;
  float eps = 1e-5f;
};

// Token shift: prev[t] = x[t - 1] within the sequence's run, prev[first row] = the sequence's saved x
// (zeros at position 0); then the slot keeps x of the run's last row. state: a slot of x.cols floats.
struct TokenShiftOp {
  View x;
  View prev;
  Rec state;
};

// Interpolation between the token and the previous one. kComplement (RWKV 4/5):
// out = x * m + (prev - prev * m). kDelta (RWKV 6/7): out = x + (prev - x) * (m + dyn), dyn being the
// data-dependent part of v6's ddlerp (a view of per-token values; absent: 0).
enum class MixForm { kComplement, kDelta };
struct MixOp {
  View x, prev;
  Vec mix;
  View dyn;
  View out;
  MixForm form = MixForm::kDelta;
};

enum class Unary {
  kSigmoid,
  kTanh,
  kSilu,
  kReluSquare,    // max(x, 0)^2 (RWKV's channel mix)
  kExpNegExp,     // exp(-exp(x)): RWKV 6's data-dependent decay
  kV7Decay,       // exp(-exp(-0.5) * sigmoid(x)): RWKV 7's decay (rwkv.cpp's form)
};

// RWKV 4's WKV in the numerically stable form: per channel, the state (aa, bb, pp) holds the decayed sums
// of exp(k) v and exp(k) scaled by exp(-pp). time_first u, time_decay w (stored as -exp(w)).
//   ww = u + k; q = max(pp, ww); out = (e^(pp-q) aa + e^(ww-q) v) / (e^(pp-q) bb + e^(ww-q))
//   ww = pp + w; q = max(ww, k); aa = e^(ww-q) aa + e^(k-q) v; bb = e^(ww-q) bb + e^(k-q); pp = q
// state: a slot of 3 * k.cols floats (aa, bb, pp).
struct Wkv4Op {
  View k, v, out;
  Vec time_first, time_decay;
  Rec state;
};

// RWKV 5/6's WKV: per head a [head_size x head_size] state S (S[i][j]: key channel i, value channel j):
//   out[j] = sum_i r[i] (u[i] k[i] v[j] + S[i][j]);  S[i][j] = S[i][j] w[i] + k[i] v[j]
// u = time_first (n_embd values, or n_head: one per head, v5.1), w = decay (a Vec of n_embd or n_head
// values, v5) or decay_view (per token, v6). state: a slot of n_head * head_size^2 floats.
struct Wkv5Op {
  View r, k, v, out;
  Vec time_first;
  Vec decay;
  View decay_view;
  int64_t n_head = 0, head_size = 0;
  Rec state;
};

// RWKV 7's WKV (the generalized delta rule), with the key preparation it needs:
//   kk = l2norm_per_head(k * k_k); k' = k + (a * (k * k_a) - k * k_a)
//   per head, S[i][j] (value channel i, key channel j), with sa[i] = sum_j -kk[j] S[i][j]:
//   S[i][j] = S[i][j] w[j] + v[i] k'[j] + sa[i] kk[j] a[j];  out[i] = sum_j S[i][j] r[j]
//   bonus[i] = v[i] * sum_{j in head} r[j] k'[j] r_k[j] (added after the group norm by the program)
// w is the decay (already exp(-0.6 sigmoid(.))), a the in-context learning rate (sigmoid). state: a slot of
// n_head * head_size^2 floats.
struct Wkv7Op {
  View r, w, k, v, a;
  Vec k_k, k_a, r_k;
  View out, bonus;
  int64_t n_head = 0, head_size = 0;
  Rec state;
};

// What a backend resolves and allocates for a Program, before the first step.
class Binder {
 public:
  virtual ~Binder() = default;
  // A tensor of the model by its GGUF name (InvalidFormat naming it when absent). find_*: a null handle.
  virtual Weight matrix(std::string_view name) = 0;
  virtual Weight find_matrix(std::string_view name) = 0;
  virtual Vec vector(std::string_view name) = 0;
  virtual Vec find_vector(std::string_view name) = 0;
  virtual Buf buffer(int64_t cols) = 0;  // [max_step_tokens][cols] f32
  virtual Rope rope(const RopeTable& table) = 0;
  virtual Kv kv(int64_t kv_layer) = 0;  // StateSpec::kv_layers[kv_layer]
  // StateSpec::recurrent[slot]. Default: Unsupported (a backend without recurrent state refuses the model).
  virtual Rec recurrent(int64_t slot);
  virtual int64_t max_step_tokens() const = 0;
  virtual int64_t max_positions() const = 0;  // positions one sequence may reach (the context)
};

// The ops of one step. Rows are the step's tokens; positions, sequences and logits rows are the backend's.
class Ops {
 public:
  virtual ~Ops() = default;
  virtual void embed(Weight table, View out, float scale) = 0;  // out = table[token] * scale
  virtual void rms_norm(const RmsNormOp& op) = 0;
  virtual void head_rms_norm(const HeadNormOp& op) = 0;
  virtual void linear(Weight w, View x, View y) = 0;  // y = W x
  // y = [W_0 x | W_1 x | ...] in consecutive columns (q/k/v, gate/up): one product where the backend
  // placed the matrices back to back (ProgramFactory::weight_groups).
  virtual void linear_concat(std::span<const Weight> ws, View x, View y) = 0;
  virtual void rope_kv(const RopeKvOp& op) = 0;
  virtual void attention(const AttentionOp& op) = 0;
  virtual void glu(const GluOp& op) = 0;
  virtual void add(View x, View y) = 0;  // x += y
  virtual void moe(const MoeOp& op) = 0;
  virtual void sigmoid_gate(View y, Vec gate, View x) = 0;  // y *= sigmoid(gate . x), per row (Qwen2-MoE)
  // x = the sum of x over the ranks of the model's tensor-parallel group (ModelConfig::shard), on every rank:
  // the row-parallel projections' partial outputs. Called only by a sharded model's Program.
  virtual void all_reduce(View x) = 0;
  virtual void logits(const LogitsOp& op) = 0;

  // The recurrent ops (RWKV). Default: Unsupported naming the op, for backends that do not run recurrent
  // models yet (they refuse such a model when it is loaded, so these are never reached there).
  virtual void layer_norm(const LayerNormOp& op);
  virtual void group_norm(const GroupNormOp& op);
  virtual void token_shift(const TokenShiftOp& op);
  virtual void mix(const MixOp& op);
  virtual void unary(View x, Unary fn);          // x = fn(x)
  virtual void mul(View x, View y);              // x *= y
  virtual void scale(View x, float s);           // x *= s (RWKV 6's rescaled GGUF: the residual halves)
  virtual void add_vec(View x, Vec b);           // x += b (per row)
  virtual void lerp_to(View x, View target, View t);  // x += (target - x) * t (RWKV 7's v_first)
  virtual void wkv4(const Wkv4Op& op);
  virtual void wkv5(const Wkv5Op& op);
  virtual void wkv7(const Wkv7Op& op);
  // Composites, so that a backend may run them as one kernel (a decode step of RWKV is launch-bound): their
  // defaults are the ops they are made of, in order, which is also their meaning.
  virtual void mixes(std::span<const MixOp> ops);  // every mix(op); RWKV 6/7's five or six mixes of one token
  virtual void bias_unary(View x, Vec b, Unary fn);  // add_vec(x, b), then unary(x, fn)
};

class Program {
 public:
  virtual ~Program() = default;
  virtual void run(Ops& ops) = 0;
};

class ProgramFactory {
 public:
  virtual ~ProgramFactory() = default;
  virtual StateSpec state() const = 0;
  // Tensors a backend may place back to back so that one product covers them (linear_concat).
  virtual std::vector<std::vector<std::string>> weight_groups() const = 0;
  virtual std::unique_ptr<Program> build(Binder& binder) const = 0;
  virtual std::string name() const = 0;  // for logs: the architecture
};

// The recurrent ops' defaults (see Ops).
inline Rec Binder::recurrent(int64_t) { GA_THROW(Unsupported, "this backend has no recurrent state (RWKV) yet"); }
#define GA_STEP_UNSUPPORTED_OP(sig, name) \
  inline void Ops::sig { GA_THROW(Unsupported, "op " name " is not implemented by this backend"); }
GA_STEP_UNSUPPORTED_OP(layer_norm(const LayerNormOp&), "layer_norm")
GA_STEP_UNSUPPORTED_OP(group_norm(const GroupNormOp&), "group_norm")
GA_STEP_UNSUPPORTED_OP(token_shift(const TokenShiftOp&), "token_shift")
GA_STEP_UNSUPPORTED_OP(mix(const MixOp&), "mix")
GA_STEP_UNSUPPORTED_OP(unary(View, Unary), "unary")
GA_STEP_UNSUPPORTED_OP(mul(View, View), "mul")
GA_STEP_UNSUPPORTED_OP(scale(View, float), "scale")
GA_STEP_UNSUPPORTED_OP(add_vec(View, Vec), "add_vec")
GA_STEP_UNSUPPORTED_OP(lerp_to(View, View, View), "lerp_to")
GA_STEP_UNSUPPORTED_OP(wkv4(const Wkv4Op&), "wkv4")
GA_STEP_UNSUPPORTED_OP(wkv5(const Wkv5Op&), "wkv5")
GA_STEP_UNSUPPORTED_OP(wkv7(const Wkv7Op&), "wkv7")
#undef GA_STEP_UNSUPPORTED_OP
inline void Ops::mixes(std::span<const MixOp> ops) {
  for (const MixOp& op : ops) mix(op);
}
inline void Ops::bias_unary(View x, Vec b, Unary fn) {
  add_vec(x, b);
  unary(x, fn);
}

}  // namespace ga::step
