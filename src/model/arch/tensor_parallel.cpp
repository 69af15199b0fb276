#include "model/arch/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"

namespace ga::arch {
namespace {

void require_divides(int64_t count, int world, const char* what) {
  GA_CHECK(count % world == 0, Unsupported, "tensor parallelism over ", world, " ranks: ", what, " (", count,
           ") does not divide by ", world);
}

// One tensor's shard: part `rank` of every segment of rows or columns of every 2-D slab.
WeightView split_tensor(const WeightView& w, const TensorSplit& split, int world, int rank, int kv_ways,
                        std::vector<std::shared_ptr<const void>>& storage) {
  const bool by_rows = split.kind == TensorSplit::Kind::kRows;
  const uint64_t cols = w.ne.empty() ? 1 : w.ne[0];
  const uint64_t rows = w.ne.size() > 1 ? w.ne[1] : 1;
  uint64_t slabs = 1;
  for (size_t d = 2; d < w.ne.size(); ++d) slabs *= w.ne[d];
  // a 1-D tensor split by rows (a bias) is a column of rows of one element
  const bool vector = w.ne.size() == 1 && by_rows;
  const uint64_t n_rows = vector ? cols : rows, n_cols = vector ? 1 : cols;
  std::vector<int64_t> segments = split.segments;
  if (segments.empty()) segments.push_back(static_cast<int64_t>(by_rows ? n_rows : n_cols));
  // per segment: into how many parts it splits and which part this rank keeps
  std::vector<int64_t> ways(segments.size(), world), part_of(segments.size(), rank);
  int64_t total = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i < split.kv.size() && split.kv[i]) {
      ways[i] = kv_ways;
      part_of[i] = rank / (world / kv_ways);
    }
    GA_CHECK(segments[i] % ways[i] == 0, Unsupported, "tensor parallelism over ", world, " ranks: ", w.name,
             " has a segment of ", segments[i], (by_rows ? " rows" : " columns"), " that does not divide by ", ways[i]);
    total += segments[i];
  }
  GA_CHECK(static_cast<uint64_t>(total) == (by_rows ? n_rows : n_cols), InvalidFormat, "tensor ", w.name,
           ": its split segments cover ", total, " of ", by_rows ? n_rows : n_cols, by_rows ? " rows" : " columns");
  const DTypeTraits& t = traits(w.type);
  const uint64_t row_b = vector ? row_bytes(w.type, 1) : row_bytes(w.type, n_cols);
  WeightView out = w;
  auto buffer = std::make_shared<std::vector<uint8_t>>();
  if (by_rows) {
    uint64_t keep_rows = 0;
    for (size_t i = 0; i < segments.size(); ++i) keep_rows += static_cast<uint64_t>(segments[i] / ways[i]);
    buffer->resize(slabs * keep_rows * row_b);
    uint8_t* dst = buffer->data();
    for (uint64_t z = 0; z < slabs; ++z) {
      const uint8_t* slab = w.data + z * n_rows * row_b;
      uint64_t first = 0;
      for (size_t i = 0; i < segments.size(); ++i) {
        const uint64_t part = static_cast<uint64_t>(segments[i] / ways[i]);
        std::memcpy(dst, slab + (first + part * static_cast<uint64_t>(part_of[i])) * row_b, part * row_b);
        dst += part * row_b;
        first += static_cast<uint64_t>(segments[i]);
      }
    }
    if (vector) {
      out.ne[0] = keep_rows;
    } else {
      out.ne[1] = keep_rows;
    }
  } else {
    const uint64_t keep_cols = n_cols / static_cast<uint64_t>(world);
    GA_CHECK(keep_cols % t.block_size == 0, Unsupported, "tensor parallelism over ", world, " ranks: ", w.name,
             " is ", t.name, " (blocks of ", t.block_size, "), and ", keep_cols,
             " columns per rank do not fall on block boundaries");
    const uint64_t part_b = row_bytes(w.type, keep_cols);
    buffer->resize(slabs * n_rows * part_b);
    uint8_t* dst = buffer->data();
    for (uint64_t r = 0; r < slabs * n_rows; ++r) {
      const uint8_t* row = w.data + r * row_b;
      uint64_t first = 0;  // in columns
      for (const int64_t seg : segments) {
        const uint64_t part = static_cast<uint64_t>(seg / world);
        const uint64_t begin = first + part * static_cast<uint64_t>(rank);
        const uint64_t bytes = row_bytes(w.type, part);
        std::memcpy(dst, row + row_bytes(w.type, begin), bytes);
        dst += bytes;
        first += static_cast<uint64_t>(seg);
      }
    }
    out.ne[0] = keep_cols;
  }
  out.data = buffer->data();
  out.nbytes = buffer->size();
  storage.push_back(std::shared_ptr<const void>(buffer, buffer->data()));
  return out;
}

}  // namespace

LoadedModel shard_for_tensor_parallel(const LoadedModel& model, int world, int rank) {
  GA_CHECK(world >= 1 && rank >= 0 && rank < world, InvalidArgument, "tensor parallelism: rank ", rank, " of ", world);
  GA_CHECK(model.config.shard.world == 1, InvalidArgument, "model '", model.config.name,
           "' is already a tensor-parallel shard");
  const ArchInfo& arch = arch_of(model.config);
  GA_CHECK(static_cast<bool>(arch.tensor_split) || world == 1, Unsupported, "architecture ", model.config.arch,
           " does not support tensor parallelism");
  LoadedModel out = model;  // the views still point into the model's storage, which `out` shares
  if (world == 1) return out;
  const ModelConfig& c = model.config;
  require_divides(c.n_head, world, "the attention heads");
  const int kv_ways = static_cast<int>(std::min<int64_t>(world, c.n_head_kv));  // fewer KV heads: replicated
  if (c.n_head_kv >= world) {
    require_divides(c.n_head_kv, world, "the KV heads");
  } else {
    GA_CHECK(world % c.n_head_kv == 0, Unsupported, "tensor parallelism over ", world, " ranks: ", c.n_head_kv,
             " KV heads neither divide by ", world, " nor divide it");
  }
  if (c.n_ff > 0) require_divides(c.n_ff, world, "the feed-forward width");
  if (c.transformer.n_ff_exp > 0) require_divides(c.transformer.n_ff_exp, world, "the experts' feed-forward width");
  if (c.transformer.n_ff_shexp > 0) {
    require_divides(c.transformer.n_ff_shexp, world, "the shared expert's feed-forward width");
  }
  // A vocabulary the world does not divide keeps a whole classifier on every rank (vocab_parallel stays false).
  const bool vocab_parallel = c.n_vocab % world == 0;
  for (auto& [name, view] : out.weights) {
    const TensorSplit split = arch.tensor_split(c, name);
    if (split.kind == TensorSplit::Kind::kReplicate) continue;
    if (name == "output.weight" && !vocab_parallel) continue;
    view = split_tensor(view, split, world, rank, kv_ways, out.storage);
    if (name == "output.weight") out.config.shard.vocab_parallel = true;
  }
  out.config.n_head /= world;
  out.config.n_head_kv /= kv_ways;
  out.config.n_ff /= world;
  out.config.transformer.n_ff_exp /= world;
  out.config.transformer.n_ff_shexp /= world;
  out.config.shard.world = world;
  out.config.shard.rank = rank;
  return out;
}

}  // namespace ga::arch
