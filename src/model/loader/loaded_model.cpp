// LoadedModel's weight lookups, shared by every loader and architecture.
//
// Kept apart from load_model (model_dispatch.cpp) so code that only uses a LoadedModel does not
// pull in every file format's loader when it links.

#include "gpu_accel/error.h"
#include "gpu_accel/model.h"

namespace ga {

const WeightView* LoadedModel::find_weight(std::string_view name) const {
  const auto it = weights.find(name);
  return it == weights.end() ? nullptr : &it->second;
}

const WeightView& LoadedModel::weight(std::string_view name) const {
  const WeightView* w = find_weight(name);
  GA_CHECK(w != nullptr, InvalidFormat, "model '", config.name, "' has no tensor ", name);
  return *w;
}

uint64_t LoadedModel::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, w] : weights) total += w.nbytes;
  return total;
}

}  // namespace ga
