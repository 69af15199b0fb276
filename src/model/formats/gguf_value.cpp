// GGUF metadata values: names, rendering for `inspect`, and File's typed getters.
//
// Getters are lenient where the meaning is unambiguous (any integer type whose value fits, since
// converters disagree on u32 vs i32 for ids and counts) and strict otherwise: a key of the wrong
// kind is a corrupt or foreign file, reported as InvalidFormat naming the key and both types.
// Floats are rendered in their shortest round-trip form (std::to_chars) so `inspect` shows 1e-05,
// not 9.99999975e-06, yet loses nothing.
#include <charconv>
#include <cstdio>
#include <limits>
#include <type_traits>

#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::gguf {
namespace {

template <typename T>
std::string shortest(T v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

void append_quoted(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += ch;  // printable ASCII and UTF-8 bytes pass through
        }
    }
  }
  out += '"';
}

// An integer value as sign + magnitude (covers u64 and i64 alike); nullopt for non-integer types.
struct IntegerValue {
  bool negative = false;
  uint64_t magnitude = 0;  // |v|
};
std::optional<IntegerValue> as_integer(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::optional<IntegerValue> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_integral_v<T>) {
          return std::nullopt;
        } else if constexpr (std::is_signed_v<T>) {
          if (x < 0) return IntegerValue{true, uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(x))};
          return IntegerValue{false, static_cast<uint64_t>(x)};
        } else {
          return IntegerValue{false, static_cast<uint64_t>(x)};
        }
      },
      v.data);
}

std::optional<int64_t> to_int64(const Value& v) {
  const auto i = as_integer(v);
  if (!i) return std::nullopt;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!i->negative && i->magnitude <= kMax) return static_cast<int64_t>(i->magnitude);
  if (i->negative && i->magnitude == kMax + 1) return std::numeric_limits<int64_t>::min();
  if (i->negative && i->magnitude <= kMax) return -static_cast<int64_t>(i->magnitude);
  return std::nullopt;
}

[[noreturn]] void wrong_type(std::string_view key, const Value& v, const char* expected) {
  GA_THROW(InvalidFormat, "gguf: key '", key, "' has type ", value_type_name(v.type), ", expected ", expected);
}

const Array* array_of(std::string_view key, const Value* v) {
  if (v == nullptr) return nullptr;
  if (v->type != ValueType::ARRAY) wrong_type(key, *v, "array");
  return &std::get<Array>(v->data);
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

Value Value::string_array(const std::vector<std::string>& items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(Value::string(s));
  return Value::array(ValueType::STRING, std::move(values));
}

Value Value::f32_array(const std::vector<float>& items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const float f : items) values.push_back(Value::f32(f));
  return Value::array(ValueType::F32, std::move(values));
}

Value Value::i32_array(const std::vector<int32_t>& items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const int32_t i : items) values.push_back(Value::i32(i));
  return Value::array(ValueType::I32, std::move(values));
}

std::string Value::to_string(size_t max_items) const {
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          return shortest(x);
        } else if constexpr (std::is_integral_v<T>) {
          return std::to_string(x);  // u8/i8 print as numbers, not characters
        } else if constexpr (std::is_same_v<T, std::string>) {
          std::string out;
          append_quoted(out, x);
          return out;
        } else {  // Array
          std::string out = "[";
          const size_t shown = std::min(max_items, x.items.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i > 0) out += ", ";
            out += x.items[i].to_string(max_items);
          }
          if (shown < x.items.size()) {
            out += shown > 0 ? ", ... " : "... ";
            out += '(';
            out += std::to_string(x.items.size());
            out += ' ';
            out += value_type_name(x.elem_type);
            out += " items)";
          }
          out += "]";
          return out;
        }
      },
      data);
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(key, *v, "string");
  return std::get<std::string>(v->data);
}

std::optional<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  const auto i = as_integer(*v);
  if (!i) wrong_type(key, *v, "an unsigned integer");
  GA_CHECK(!i->negative || i->magnitude == 0, InvalidFormat, "gguf: key '", key, "' is negative (", v->to_string(),
           "), expected an unsigned integer");
  return i->magnitude;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!as_integer(*v)) wrong_type(key, *v, "an integer");
  const auto i = to_int64(*v);
  GA_CHECK(i.has_value(), InvalidFormat, "gguf: key '", key, "' value ", v->to_string(), " does not fit int64");
  return *i;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type == ValueType::F32) return static_cast<double>(std::get<float>(v->data));
  if (v->type == ValueType::F64) return std::get<double>(v->data);
  wrong_type(key, *v, "f32 or f64");
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::BOOL) wrong_type(key, *v, "bool");
  return std::get<bool>(v->data);
}

std::optional<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Array* a = array_of(key, find(key));
  if (a == nullptr) return std::nullopt;
  GA_CHECK(a->elem_type == ValueType::STRING, InvalidFormat, "gguf: key '", key, "' is an array of ",
           value_type_name(a->elem_type), ", expected an array of string");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    const auto* s = std::get_if<std::string>(&item.data);
    GA_CHECK(s != nullptr, InvalidFormat, "gguf: key '", key, "' holds a non-string item");
    out.push_back(*s);
  }
  return out;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
  const Array* a = array_of(key, find(key));
  if (a == nullptr) return std::nullopt;
  GA_CHECK(a->elem_type == ValueType::F32 || a->elem_type == ValueType::F64, InvalidFormat, "gguf: key '", key,
           "' is an array of ", value_type_name(a->elem_type), ", expected an array of f32");
  std::vector<float> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    if (const auto* f = std::get_if<float>(&item.data)) {
      out.push_back(*f);
    } else if (const auto* d = std::get_if<double>(&item.data)) {
      out.push_back(static_cast<float>(*d));
    } else {
      GA_THROW(InvalidFormat, "gguf: key '", key, "' holds a non-float item");
    }
  }
  return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Array* a = array_of(key, find(key));
  if (a == nullptr) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    const Value& item = a->items[i];
    GA_CHECK(as_integer(item).has_value(), InvalidFormat, "gguf: key '", key, "' is an array of ",
             value_type_name(a->elem_type), ", expected an array of integers");
    const auto v = to_int64(item);
    GA_CHECK(v.has_value(), InvalidFormat, "gguf: key '", key, "' item ", i, " (", item.to_string(),
             ") does not fit int64");
    out.push_back(*v);
  }
  return out;
}

}  // namespace ga::gguf
