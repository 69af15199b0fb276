// The CPU KV pool (see kv_pool.h).
#include "backends/cpu/kv_pool.h"

#include <algorithm>
#include <new>
#include <stdexcept>

#include "gpu_accel/error.h"

namespace ga::cpu {

bool cpu_kv_type_supported(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::F8_E4M3;
}

uint64_t kv_bytes_per_head_position(DType type, int64_t head_dim) {
  const uint64_t hd = static_cast<uint64_t>(head_dim);
  switch (type) {
    case DType::F32: return 2 * hd * 4;
    case DType::F16: return 2 * hd * 2;
    case DType::F8_E4M3: return 2 * (hd + sizeof(float));
    default: GA_THROW(InvalidArgument, "KV cache type ", dtype_name(type), " (supported: F32, F16, F8_E4M3)");
  }
}

KvPool::KvPool(const step::StateSpec& state, const KvPoolParams& params) : params_(params) {
  GA_CHECK(params.n_blocks > 0 && params.block_size > 0, InvalidArgument, "KV pool needs n_blocks > 0 and ",
           "block_size > 0 (got ", params.n_blocks, " and ", params.block_size, ")");
  GA_CHECK(cpu_kv_type_supported(params.kv_type), InvalidArgument, "KV cache type ", dtype_name(params.kv_type),
           " (supported: F32, F16, F8_E4M3)");
  constexpr int64_t kMaxPositions = int64_t{1} << 32;  // keeps every size computation far from overflow
  GA_CHECK(params.n_blocks <= kMaxPositions / params.block_size, InvalidArgument, "KV pool of ", params.n_blocks,
           " blocks x ", params.block_size, " positions is too large");
  const bool fp8 = params.kv_type == DType::F8_E4M3;
  const uint64_t slots = static_cast<uint64_t>(params.n_blocks * params.block_size);
  const auto align16 = [](uint64_t n) { return (n + 15) / 16 * 16; };  // the scales' planes stay float-aligned
  uint64_t total = 0;
  for (const step::KvLayerSpec& l : state.kv_layers) {
    GA_CHECK(l.n_head_kv > 0 && l.head_dim > 0, InvalidArgument, "KV layer with ", l.n_head_kv, " heads of ",
             l.head_dim);
    Layer layer;
    layer.kv_dim = l.n_head_kv * l.head_dim;
    const uint64_t plane = align16(row_bytes(params.kv_type, slots * static_cast<uint64_t>(layer.kv_dim)));
    layer.k_offset = total;
    layer.v_offset = total + plane;
    total += 2 * plane;
    if (fp8) {  // [slots][n_head_kv] floats each
      const uint64_t scale_plane = align16(slots * static_cast<uint64_t>(l.n_head_kv) * sizeof(float));
      layer.k_scale_offset = total;
      layer.v_scale_offset = total + scale_plane;
      total += 2 * scale_plane;
    }
    layers_.push_back(layer);
  }
  for (const step::RecurrentSpec& r : state.recurrent) {
    GA_CHECK(r.floats > 0, InvalidArgument, "recurrent slot of ", r.floats, " floats");
    rec_offsets_.push_back(rec_floats_);
    rec_floats_ += static_cast<uint64_t>(r.floats);
  }
  if (!state.recurrent.empty()) {
    rec_.resize(static_cast<size_t>(params.n_blocks));
    rec_pos_.assign(static_cast<size_t>(params.n_blocks), 0);
  }
  const double mib = static_cast<double>(total) / (1 << 20);
  try {
    data_.resize(total);
  } catch (const std::bad_alloc&) {
    GA_THROW(OutOfMemory, "cannot allocate the KV cache of ", slots, " positions (", mib, " MiB)");
  } catch (const std::length_error&) {
    GA_THROW(OutOfMemory, "KV cache of ", mib, " MiB exceeds the addressable size");
  }
}

float* KvPool::recurrent(int64_t slot, int64_t block) {
  std::vector<float>& b = rec_[static_cast<size_t>(block)];
  if (b.empty()) {
    try {
      b.resize(rec_floats_);
    } catch (const std::bad_alloc&) {
      GA_THROW(OutOfMemory, "cannot allocate a sequence's recurrent state of ", rec_floats_ * 4, " bytes");
    }
  }
  return b.data() + rec_offsets_[static_cast<size_t>(slot)];
}

step::RecurrentSnapshot KvPool::save_recurrent(int64_t block) const {
  GA_CHECK(block >= 0 && block < params_.n_blocks, InvalidArgument, "block ", block, " outside the pool");
  GA_CHECK(!rec_.empty() && !rec_[static_cast<size_t>(block)].empty() && rec_pos_[static_cast<size_t>(block)] > 0,
           InvalidArgument, "no recurrent state is kept beside block ", block);
  return step::RecurrentSnapshot{rec_pos_[static_cast<size_t>(block)], rec_[static_cast<size_t>(block)]};
}

void KvPool::restore_recurrent(int64_t block, const step::RecurrentSnapshot& snapshot) {
  GA_CHECK(block >= 0 && block < params_.n_blocks, InvalidArgument, "block ", block, " outside the pool");
  GA_CHECK(!rec_.empty() && snapshot.floats.size() == rec_floats_ && snapshot.pos > 0, InvalidArgument,
           "a recurrent snapshot of ", snapshot.floats.size(), " floats at position ", snapshot.pos, " for a pool of ",
           rec_floats_, " floats per sequence");
  float* dst = recurrent(0, block);
  std::copy(snapshot.floats.begin(), snapshot.floats.end(), dst);
  rec_pos_[static_cast<size_t>(block)] = snapshot.pos;
}

bool KvPool::matches(const step::StateSpec& state) const {
  if (state.kv_layers.size() != layers_.size() || state.recurrent.size() != rec_offsets_.size()) return false;
  for (size_t i = 0; i < rec_offsets_.size(); ++i) {
    const uint64_t end = i + 1 < rec_offsets_.size() ? rec_offsets_[i + 1] : rec_floats_;
    if (static_cast<uint64_t>(state.recurrent[i].floats) != end - rec_offsets_[i]) return false;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (state.kv_layers[i].n_head_kv * state.kv_layers[i].head_dim != layers_[i].kv_dim) return false;
  }
  return true;
}

}  // namespace ga::cpu
