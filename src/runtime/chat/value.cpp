// Python object semantics for chat-template values (see value.h).
#include "runtime/chat/value.h"

#include <algorithm>
#include <cmath>

#include "runtime/chat/text.h"

namespace ga::chat {

void fail(const std::string& message) { throw RuntimeError(message); }

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string reason) {
  Value v;
  v.s = std::move(reason);
  return v;
}

Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}

Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}

Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}

Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}

Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}

Value Value::list_of(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind = Kind::List;
  v.tuple = is_tuple;
  v.list = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}

Value Value::dict_of(Dict d) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::namespace_of(Dict d) {
  Value v = dict_of(std::move(d));
  v.kind = Kind::Namespace;
  return v;
}

Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::move(c);
  return v;
}

const std::vector<Value>& Value::items() const {
  static const std::vector<Value> empty;
  return list ? *list : empty;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0;
    case Kind::String: return !s.empty();
    case Kind::List: return !items().empty();
    case Kind::Dict: return !dict->entries.empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return v.tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::String: return v.s;
    default: return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return py_float_repr(v.f);
    case Kind::String: return py_repr_string(v.s);
    case Kind::List: {
      std::string out = v.tuple ? "(" : "[";
      const auto& xs = v.items();
      for (size_t k = 0; k < xs.size(); ++k) out += (k ? ", " : "") + to_repr(xs[k]);
      if (v.tuple && xs.size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Kind::Dict:
    case Kind::Namespace: {
      std::string out = v.kind == Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->entries) {
        out += (first ? "" : ", ") + py_repr_string(k) + ": " + to_repr(x);
        first = false;
      }
      return out + (v.kind == Kind::Namespace ? "}>" : "}");
    }
    case Kind::Callable: return std::string("<function ") + v.fn->name() + ">";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List: {
      const auto &xs = a.items(), &ys = b.items();
      if (xs.size() != ys.size()) return false;
      for (size_t k = 0; k < xs.size(); ++k)
        if (!equals(xs[k], ys[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& [k, x] : a.dict->entries) {
        const Value* y = b.dict->find(k);
        if (!y || !equals(x, *y)) return false;
      }
      return true;
    }
    case Kind::Namespace: return a.dict == b.dict;
    case Kind::Callable: return a.fn == b.fn;
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s;  // UTF-8 order is code point order
  if (a.kind == Kind::List && b.kind == Kind::List) {
    const auto &xs = a.items(), &ys = b.items();
    for (size_t k = 0; k < xs.size() && k < ys.size(); ++k) {
      if (!equals(xs[k], ys[k])) return less_than(xs[k], ys[k]);
    }
    return xs.size() < ys.size();
  }
  if (a.is_undefined()) fail(a.s);
  if (b.is_undefined()) fail(b.s);
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: return v.items();
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict->entries) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (char32_t cp : utf8_to_u32(v.s)) {
        std::string c;
        append_utf8(c, cp);
        chars.push_back(Value::string(std::move(c)));
      }
      return chars;
    }
    default: fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(utf8_length(v.s));
    case Kind::List: return static_cast<int64_t>(v.items().size());
    case Kind::Dict: return static_cast<int64_t>(v.dict->entries.size());
    default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

namespace {

void write_json(const Value& v, int indent, int depth, bool ensure_ascii, bool sort_keys, std::string& out) {
  const std::string newline = indent >= 0 ? std::string("\n") + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string closing = indent >= 0 ? std::string("\n") + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* item_sep = indent >= 0 ? "," : ", ";  // Python's separators: (', ', ': ') or (',', ': ') with indent
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(v.f);
      return;
    case Kind::String: out += json_quote(v.s, ensure_ascii); return;
    case Kind::List: {
      const auto& xs = v.items();
      if (xs.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t k = 0; k < xs.size(); ++k) {
        out += (k ? item_sep : "") + newline;
        write_json(xs[k], indent, depth + 1, ensure_ascii, sort_keys, out);
      }
      out += closing + "]";
      return;
    }
    case Kind::Dict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict->entries) entries.push_back(&e);
      if (sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return x->first < y->first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      for (size_t k = 0; k < entries.size(); ++k) {
        out += (k ? item_sep : "") + newline + json_quote(entries[k]->first, ensure_ascii) + ": ";
        write_json(entries[k]->second, indent, depth + 1, ensure_ascii, sort_keys, out);
      }
      out += closing + "}";
      return;
    }
    default: fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys) {
  std::string out;
  write_json(v, indent, 0, ensure_ascii, sort_keys, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list_of(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value()));
      return Value::dict_of(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace ga::chat
