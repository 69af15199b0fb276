// Tensor parallelism (Megatron-style) as a transformation of a loaded model: rank r of a W-rank group keeps its
// share of the attention heads (q, k, v rows; the output projection's matching columns) and of the
// feed-forward width (gate / up rows, down columns; every expert's likewise) and of the vocabulary (the
// classifier's rows, when it is not the tied embedding table and W divides the vocabulary: the backend gathers
// the logits slices, TensorParallelShard::vocab_parallel), and replicates the rest (embeddings, norms, the
// router). The shard's config says n_head / W, n_head_kv / W, n_ff / W and ModelConfig::shard = {W, r}; its
// Program sums the two row-parallel outputs of every layer over the group (step::Ops::all_reduce), so every rank
// ends each layer with the unsplit model's hidden state.
//
// Which tensor splits how is the architecture's (ArchInfo::tensor_split); the decoder families declare it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "gpu_accel/model.h"

namespace ga::arch {

// How one tensor is split. Rows / columns of every 2-D slab (a 3-D expert stack: each expert's matrix) come in
// consecutive segments (fused q|k|v, gate|up), each divided into W equal parts; rank r keeps part r of each.
// K/V heads (kv segments) split over min(world, n_head_kv) parts: with fewer KV heads than ranks, each KV head
// is replicated on world / n_head_kv consecutive ranks, whose query heads all read it (as vLLM does).
struct TensorSplit {
  enum class Kind { kReplicate, kRows, kCols } kind = Kind::kReplicate;
  std::vector<int64_t> segments;  // rows (kRows) or columns (kCols) per segment; empty: one segment, all of them
  std::vector<bool> kv;           // per segment (empty: none): a K/V-head segment
};

// The shard of `model` that `rank` of `world` holds. Throws Unsupported (the architecture does not split, or
// a count does not divide: heads and FFN width by world, KV heads by world or world by KV heads) or InvalidArgument naming the tensor or the
// count. The shard's views point into its own storage and the model's (which must outlive it).
LoadedModel shard_for_tensor_parallel(const LoadedModel& model, int world, int rank);

}  // namespace ga::arch
