// Hugging Face config.json: parsing and typed access, for the architectures' readers (model/arch/).
//
// This layer knows JSON, not models: which fields an architecture reads, and transformers' defaults for
// them, are the architecture's (model/arch/hf_common.h and each family's file). A JSON null counts as
// absent (transformers writes "head_dim": null, "rope_scaling": null, "sliding_window": null). Every error
// names the file and the key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_accel/model.h"

namespace ga::hf {

// A JSON object of a config (the root or a nested one) with typed getters.
class JsonReader {
 public:
  JsonReader(std::shared_ptr<const nlohmann::json> root, const nlohmann::json* object, std::string source);

  bool has(std::string_view key) const;       // present and not null
  bool contains(std::string_view key) const;  // present, null or not
  int64_t positive_int(std::string_view key, std::optional<int64_t> fallback = {}) const;
  int64_t integer(std::string_view key, int64_t fallback) const;
  double number(std::string_view key, double fallback) const;
  std::optional<double> optional_number(std::string_view key) const;
  bool boolean(std::string_view key, bool fallback) const;
  std::string string(std::string_view key, std::string fallback) const;
  std::vector<double> numbers(std::string_view key) const;       // a list of numbers (InvalidFormat otherwise)
  std::vector<std::string> strings(std::string_view key) const;  // a list of strings
  std::vector<int64_t> integers(std::string_view key) const;     // a list of integers
  // A nested object; nullopt when absent. InvalidFormat when present but not an object.
  std::optional<JsonReader> object(std::string_view key) const;
  // The members of this object that are objects themselves (transformers 5's per-layer-type RoPE).
  std::vector<std::pair<std::string, JsonReader>> object_members() const;
  bool is_object_of_objects() const;
  bool equals(const JsonReader& other) const;  // the same JSON value
  std::string dump(std::string_view key) const;  // the value as JSON text ("null" when absent)
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json* field(std::string_view key) const;
  std::shared_ptr<const nlohmann::json> root_;  // keeps the document alive
  const nlohmann::json* obj_;
  std::string source_;
};

struct HfConfig {
  std::string architecture;  // the first "architectures" entry ("" when there is none)
  std::vector<std::string> architectures;
  std::string model_type;
  JsonReader root;
  // Every top-level key of config.json, rendered as JSON ("config.<key>"), for `inspect`.
  std::vector<MetadataEntry> entries;
};

// Parses the text of a config.json; `source` names it in error messages. Checks only that it is a JSON
// object whose "architectures" (if any) is a list of strings.
HfConfig parse_config(std::string_view json_text, const std::string& source);
HfConfig read_config(const std::string& path);

}  // namespace ga::hf
