// config.json parsing and typed access (see hf_config.h).
#include "model/formats/hf_config.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"

namespace ga::hf {

using nlohmann::json;

JsonReader::JsonReader(std::shared_ptr<const json> root, const json* object, std::string source)
    : root_(std::move(root)), obj_(object), source_(std::move(source)) {}

const json* JsonReader::field(std::string_view key) const {
  const auto it = obj_->find(key);
  return it == obj_->end() || it->is_null() ? nullptr : &*it;
}

bool JsonReader::has(std::string_view key) const { return field(key) != nullptr; }
bool JsonReader::contains(std::string_view key) const { return obj_->find(key) != obj_->end(); }

int64_t JsonReader::positive_int(std::string_view key, std::optional<int64_t> fallback) const {
  const json* v = field(key);
  if (v == nullptr) {
    GA_CHECK(fallback.has_value(), InvalidFormat, source_, ": missing \"", key, "\"");
    return *fallback;
  }
  GA_CHECK(v->is_number_integer() && v->get<int64_t>() > 0, InvalidFormat, source_, ": \"", key,
           "\" must be a positive integer, got ", v->dump());
  return v->get<int64_t>();
}

int64_t JsonReader::integer(std::string_view key, int64_t fallback) const {
  const json* v = field(key);
  if (v == nullptr) return fallback;
  GA_CHECK(v->is_number_integer(), InvalidFormat, source_, ": \"", key, "\" must be an integer, got ", v->dump());
  return v->get<int64_t>();
}

std::optional<double> JsonReader::optional_number(std::string_view key) const {
  const json* v = field(key);
  if (v == nullptr) return std::nullopt;
  GA_CHECK(v->is_number(), InvalidFormat, source_, ": \"", key, "\" must be a number, got ", v->dump());
  const double d = v->get<double>();
  GA_CHECK(std::isfinite(d), InvalidFormat, source_, ": \"", key, "\" is not finite");
  return d;
}

double JsonReader::number(std::string_view key, double fallback) const {
  return optional_number(key).value_or(fallback);
}

bool JsonReader::boolean(std::string_view key, bool fallback) const {
  const json* v = field(key);
  if (v == nullptr) return fallback;
  GA_CHECK(v->is_boolean(), InvalidFormat, source_, ": \"", key, "\" must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string JsonReader::string(std::string_view key, std::string fallback) const {
  const json* v = field(key);
  if (v == nullptr) return fallback;
  GA_CHECK(v->is_string(), InvalidFormat, source_, ": \"", key, "\" must be a string, got ", v->dump());
  return v->get<std::string>();
}

std::vector<double> JsonReader::numbers(std::string_view key) const {
  const json* v = field(key);
  GA_CHECK(v != nullptr && v->is_array(), InvalidFormat, source_, ": \"", key, "\" must be a list of numbers");
  std::vector<double> out;
  for (const json& e : *v) {
    GA_CHECK(e.is_number() && std::isfinite(e.get<double>()), InvalidFormat, source_, ": \"", key,
             "\" holds ", e.dump(), ", not a finite number");
    out.push_back(e.get<double>());
  }
  return out;
}

std::vector<int64_t> JsonReader::integers(std::string_view key) const {
  const json* v = field(key);
  GA_CHECK(v != nullptr && v->is_array(), InvalidFormat, source_, ": \"", key, "\" must be a list of integers");
  std::vector<int64_t> out;
  for (const json& e : *v) {
    GA_CHECK(e.is_number_integer(), InvalidFormat, source_, ": \"", key, "\" holds ", e.dump(), ", not an integer");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> JsonReader::strings(std::string_view key) const {
  const json* v = field(key);
  GA_CHECK(v != nullptr && v->is_array(), InvalidFormat, source_, ": \"", key, "\" must be a list of strings");
  std::vector<std::string> out;
  for (const json& e : *v) {
    GA_CHECK(e.is_string(), InvalidFormat, source_, ": \"", key, "\" holds ", e.dump(), ", not a string");
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<JsonReader> JsonReader::object(std::string_view key) const {
  const json* v = field(key);
  if (v == nullptr) return std::nullopt;
  GA_CHECK(v->is_object(), InvalidFormat, source_, ": \"", key, "\" must be an object, got ", v->dump());
  return JsonReader(root_, v, source_);
}

bool JsonReader::is_object_of_objects() const {
  return !obj_->empty() && std::all_of(obj_->begin(), obj_->end(), [](const json& v) { return v.is_object(); });
}

std::vector<std::pair<std::string, JsonReader>> JsonReader::object_members() const {
  std::vector<std::pair<std::string, JsonReader>> out;
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (it->is_object()) out.emplace_back(it.key(), JsonReader(root_, &*it, source_));
  }
  return out;
}

bool JsonReader::equals(const JsonReader& other) const { return *obj_ == *other.obj_; }

std::string JsonReader::dump(std::string_view key) const {
  const json* v = field(key);
  return v == nullptr ? "null" : v->dump();
}

HfConfig parse_config(std::string_view json_text, const std::string& source) {
  auto root = std::make_shared<json>();
  try {
    *root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    GA_THROW(InvalidFormat, source, ": not valid JSON: ", e.what());
  }
  GA_CHECK(root->is_object(), InvalidFormat, source, ": config is not a JSON object");
  HfConfig out{"", {}, "", JsonReader(root, root.get(), source), {}};
  if (const auto it = root->find("architectures"); it != root->end() && !it->is_null()) {
    GA_CHECK(it->is_array() && !it->empty(), InvalidFormat, source, ": \"architectures\" must be a non-empty list");
    for (const json& a : *it) {
      GA_CHECK(a.is_string(), InvalidFormat, source, ": \"architectures\" holds a non-string ", a.dump());
      out.architectures.push_back(a.get<std::string>());
    }
    out.architecture = out.architectures.front();
  }
  out.model_type = out.root.string("model_type", "");
  for (const auto& [key, value] : root->items()) out.entries.push_back({"config." + key, value.dump()});
  return out;
}

HfConfig read_config(const std::string& path) { return parse_config(read_text_file(path), path); }

}  // namespace ga::hf
