// The decoder-only transformer forward, written once against the step op vocabulary, shared by the
// families whose differences are data (ModelConfig::transformer): Llama / Mistral / Qwen2, Qwen3 (q/k norm),
// Gemma 2 and 3 (sandwich norms, GeGLU, soft-caps, windowed layers with their own RoPE), Phi-3 (fused
// q/k/v and gate/up, LongRoPE) and the mixtures of experts (Mixtral, Qwen2-MoE with its shared expert,
// Qwen3-MoE). Each family's file reads its hyperparameters and maps its tensor names; this file turns
// the knobs into tensor specs, per-sequence state and the layer loop. llama.cpp's per-arch graph builders
// share build_attn / build_ffn / build_moe_ffn the same way.
//
// One layer, in the ops' terms (resid: the residual stream, tmp: the previous block's output, which the
// next norm adds to resid in the same pass):
//   h    = rmsnorm(resid += tmp) * attn_norm
//   qkv  = [Wq h | Wk h | Wv h]      (or Wqkv h)   [; per-head q/k RMSNorm]
//   rope_kv: q, k rotated (+ biases), k/v into the layer's pages
//   tmp  = Wo attention(q, pages; window, softcap)  [; tmp = rmsnorm(tmp) * post_attention_norm]
//   h    = rmsnorm(resid += tmp) * ffn_norm
//   tmp  = W_down act(W_gate h) * (W_up h)  or the MoE ( + the shared expert )  [; post_ffw_norm]
// and after the last layer logits = output(rmsnorm(resid += tmp) * output_norm) [; final soft-cap].
#pragma once

#include <memory>
#include <vector>

#include "backends/step_ops.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"

namespace ga::arch {

// Every tensor a decoder of this config reads (optional ones with required = false).
std::vector<TensorSpec> decoder_tensor_specs(const ModelConfig& config);
// Hyperparameters the decoder cannot run (InvalidFormat / Unsupported naming them).
void check_decoder_config(const ModelConfig& config);
std::unique_ptr<step::ProgramFactory> make_decoder_factory(const LoadedModel& model);
// Megatron's split of the decoder's tensors (tensor_parallel.h): column-parallel q/k/v and gate/up, row-parallel
// attn_output and ffn_down, the rest replicated.
TensorSplit decoder_tensor_split(const ModelConfig& config, std::string_view name);

}  // namespace ga::arch
