// The CPU backend's paged KV pool: K and V of every attention layer for a pool of fixed-size blocks.
//
// Memory only, no bookkeeping: which blocks a sequence owns is the runtime's block manager's business
// (runtime/engine/kv_cache.h). Per layer, K then V, each [n_blocks][block_size][n_head_kv][head_dim] of
// kv_type; layers may differ in their KV width (step::StateSpec lists them).
// F8_E4M3 (the FP8 cache): K and V hold E4M3 codes, and each has a float scale per (position, KV head) beside
// it, [n_blocks][block_size][n_head_kv] (k_scales / v_scales): value = e4m3(code) * scale, scale = the row's
// largest magnitude / 448 (store_kv_fp8, ops.h). Half the bytes of F16 plus 8 bytes per position and KV head.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/step_ops.h"
#include "gpu_accel/dtype.h"

namespace ga::cpu {

struct KvPoolParams {
  int64_t n_blocks = 0;
  int64_t block_size = 16;     // positions per block
  DType kv_type = DType::F32;  // F32, F16 or F8_E4M3
};

// Whether the CPU KV pool (and the CPU attention) hold a cache of this type: F32, F16, F8_E4M3.
bool cpu_kv_type_supported(DType type);
// Bytes of one cached position of one KV head of head_dim values, K and V together, in a cache of `type`:
// the codes and, for F8_E4M3, the two float scales (what a pool of this type costs per position and head).
uint64_t kv_bytes_per_head_position(DType type, int64_t head_dim);

class KvPool {
 public:
  // OutOfMemory when it cannot allocate; InvalidArgument for a bad size or type.
  KvPool(const step::StateSpec& state, const KvPoolParams& params);
  int64_t n_blocks() const { return params_.n_blocks; }
  int64_t block_size() const { return params_.block_size; }
  DType kv_type() const { return params_.kv_type; }
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t kv_dim(int64_t layer) const { return layers_[static_cast<size_t>(layer)].kv_dim; }
  uint64_t bytes() const { return static_cast<uint64_t>(data_.size()); }
  uint8_t* k(int64_t layer) { return data_.data() + layers_[static_cast<size_t>(layer)].k_offset; }
  uint8_t* v(int64_t layer) { return data_.data() + layers_[static_cast<size_t>(layer)].v_offset; }
  // F8_E4M3: the scales of K and V, [n_blocks][block_size][n_head_kv]; nullptr for the other types.
  float* k_scales(int64_t layer) { return scales(layers_[static_cast<size_t>(layer)].k_scale_offset); }
  float* v_scales(int64_t layer) { return scales(layers_[static_cast<size_t>(layer)].v_scale_offset); }
  // Whether this pool holds the layers `state` describes (same count and widths, same recurrent slots).
  bool matches(const step::StateSpec& state) const;

  // Recurrent state (step::StateSpec::recurrent): a sequence's slots live beside its first block, made on
  // the block's first use (a pool of many blocks pays only for the blocks that start sequences).
  // recurrent_pos(block): the position the state of the sequence starting at `block` stands at.
  int64_t n_recurrent() const { return static_cast<int64_t>(rec_offsets_.size()); }
  float* recurrent(int64_t slot, int64_t block);
  int64_t& recurrent_pos(int64_t block) { return rec_pos_[static_cast<size_t>(block)]; }
  // A copy of the state beside `block` (InvalidArgument when it holds none), and one put back there.
  step::RecurrentSnapshot save_recurrent(int64_t block) const;
  void restore_recurrent(int64_t block, const step::RecurrentSnapshot& snapshot);

 private:
  struct Layer {
    int64_t kv_dim = 0;
    uint64_t k_offset = 0, v_offset = 0;
    uint64_t k_scale_offset = 0, v_scale_offset = 0;  // F8_E4M3 only
  };
  float* scales(uint64_t offset) {
    return params_.kv_type == DType::F8_E4M3 ? reinterpret_cast<float*>(data_.data() + offset) : nullptr;
  }
  KvPoolParams params_;
  std::vector<Layer> layers_;
  std::vector<uint8_t> data_;
  std::vector<uint64_t> rec_offsets_;            // per slot, into a block's floats
  uint64_t rec_floats_ = 0;                      // per block
  std::vector<std::vector<float>> rec_;          // [n_blocks][rec_floats_] (empty until used)
  std::vector<int64_t> rec_pos_;                 // [n_blocks]
};

}  // namespace ga::cpu
