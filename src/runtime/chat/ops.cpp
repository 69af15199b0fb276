// Operators, attribute/item/slice access and the str/dict methods templates call, with Python's semantics.
//
// Results and failures follow what jinja2's sandbox does on Python objects: `'a' + 1` fails like Python's
// TypeError, a missing key or attribute is Undefined (whose message names the object type the way jinja2
// does), list-mutating methods are refused as unsafe, and integers stay exact (int64, overflow is an error).
#include <cmath>
#include <ctime>

#include "runtime/chat/interpreter.h"
#include "runtime/chat/text.h"

namespace ga::chat {

namespace {

// jinja2's object_type_repr, for "'dict object' has no attribute 'x'" style messages.
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(type_name(v)) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(cat("'", object_type_repr(obj), "' has no attribute '", name, "'"));
}

[[noreturn]] void unsupported_operands(const std::string& op, const Value& a, const Value& b) {
  fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Exact int64 arithmetic; Python's ints are unbounded, so leaving int64 is reported instead of wrapping.
int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow");
  return r;
}

const Value* arg(CallArgs& a, size_t index, const char* name) {
  if (index < a.positional.size()) return &a.positional[index];
  for (auto& [k, v] : a.keyword)
    if (k == name) return &v;
  return nullptr;
}

const std::string& string_arg(CallArgs& a, size_t index, const char* name, const char* method) {
  const Value* v = arg(a, index, name);
  if (!v || !v->is_string()) fail(std::string(method) + "() argument '" + name + "' must be str");
  return v->s;
}

int64_t int_arg(CallArgs& a, size_t index, const char* name, int64_t fallback) {
  const Value* v = arg(a, index, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_integral()) fail(std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int();
}

std::string py_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') fail("Single '}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fail(std::string("format specifications are not supported: {") + field + "}");
    const Value* v = nullptr;
    if (field.empty()) {
      v = next_auto < args.positional.size() ? &args.positional[next_auto++] : nullptr;
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t index = std::stoul(field);
      v = index < args.positional.size() ? &args.positional[index] : nullptr;
    } else {
      for (auto& [k, x] : args.keyword)
        if (k == field) v = &x;
    }
    if (!v) fail(std::string("format(): no argument for field {") + field + "}");
    out += to_str(*v);
    i = close;
  }
  return out;
}

bool starts_or_ends_with(const std::string& s, const Value& affix, bool at_start) {
  auto test = [&](const Value& x) {
    if (!x.is_string()) fail("startswith/endswith first arg must be str or a tuple of str");
    if (x.s.size() > s.size()) return false;
    return at_start ? s.compare(0, x.s.size(), x.s) == 0 : s.compare(s.size() - x.s.size(), x.s.size(), x.s) == 0;
  };
  if (affix.kind == Kind::List) {
    for (const Value& x : affix.items())
      if (test(x)) return true;
    return false;
  }
  return test(affix);
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (char c : s)
    if (!pred(static_cast<unsigned char>(c))) return false;
  return true;
}

Value string_method(Interpreter& in, const std::string& s, const std::string& m, CallArgs& a) {
  auto opt_chars = [&](const char* name) -> const std::string* {
    const Value* v = arg(a, 0, name);
    return (v && v->is_string()) ? &v->s : nullptr;
  };
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return Value::string(py_strip(s, opt_chars("chars"), m != "rstrip", m != "lstrip"));
  if (m == "split") {
    const Value* sep = arg(a, 0, "sep");
    std::vector<Value> parts;
    for (auto& p : py_split(s, (sep && sep->is_string()) ? &sep->s : nullptr, int_arg(a, 1, "maxsplit", -1)))
      parts.push_back(Value::string(std::move(p)));
    if (sep && sep->is_string() && sep->s.empty()) fail("empty separator");
    return Value::list_of(std::move(parts));
  }
  if (m == "splitlines") {
    std::vector<Value> parts;
    for (auto& p : py_splitlines(s)) parts.push_back(Value::string(std::move(p)));
    return Value::list_of(std::move(parts));
  }
  if (m == "startswith" || m == "endswith") {
    const Value* affix = arg(a, 0, "prefix");
    if (!affix) fail(m + "() takes at least 1 argument (0 given)");
    return Value::boolean(starts_or_ends_with(s, *affix, m == "startswith"));
  }
  if (m == "upper") return Value::string(ascii_upper(s));
  if (m == "lower") return Value::string(ascii_lower(s));
  if (m == "title") return Value::string(py_str_title(s));
  if (m == "capitalize") return Value::string(py_capitalize(s));
  if (m == "replace") {
    std::string r = py_replace(s, string_arg(a, 0, "old", "replace"), string_arg(a, 1, "new", "replace"),
                               int_arg(a, 2, "count", -1));
    in.check_string_size(r.size());
    return Value::string(std::move(r));
  }
  if (m == "find" || m == "rfind" || m == "count" || m == "index" || m == "rindex") {
    const std::string& sub = string_arg(a, 0, "sub", m.c_str());
    if (m == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t p = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (m == "index" || m == "rindex") fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
  }
  if (m == "join") {
    const Value* items = arg(a, 0, "iterable");
    if (!items) fail("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(*items)) {
      if (!x.is_string()) fail(std::string("sequence item: expected str instance, ") + type_name(x) + " found");
      out += (first ? "" : s) + x.s;
      first = false;
      in.check_string_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (m == "format") return Value::string(py_format(s, a));
  if (m == "removeprefix" || m == "removesuffix") {
    const std::string& x = string_arg(a, 0, "affix", m.c_str());
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (m == "removesuffix" && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::string(s.substr(0, s.size() - x.size()));
    return Value::string(s);
  }
  if (m == "isdigit") return Value::boolean(all_chars(s, [](unsigned char c) { return c >= '0' && c <= '9'; }));
  if (m == "isalpha") return Value::boolean(all_chars(s, [](unsigned char c) { return std::isalpha(c) != 0; }));
  if (m == "isalnum") return Value::boolean(all_chars(s, [](unsigned char c) { return std::isalnum(c) != 0; }));
  if (m == "isspace") return Value::boolean(all_chars(s, [](unsigned char c) { return std::isspace(c) != 0; }));
  if (m == "islower" || m == "isupper") {
    bool cased = false, ok = true;
    for (char c : s) {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        cased = true;
        if ((m == "islower") != (std::islower(static_cast<unsigned char>(c)) != 0)) ok = false;
      }
    }
    return Value::boolean(cased && ok);
  }
  fail(std::string("'str' object has no attribute '") + m + "'");
}

Value dict_method(const Value& self, const std::string& m, CallArgs& a) {
  const auto& entries = self.dict->entries;
  if (m == "items" || m == "keys" || m == "values") {
    std::vector<Value> out;
    out.reserve(entries.size());
    for (const auto& [k, v] : entries) {
      if (m == "items") out.push_back(Value::list_of({Value::string(k), v}, true));
      else out.push_back(m == "keys" ? Value::string(k) : v);
    }
    return Value::list_of(std::move(out));
  }
  // get(key, default=None): Python's None, not Jinja's Undefined
  const Value* key = arg(a, 0, "key");
  if (!key) fail("get expected at least 1 argument, got 0");
  const Value* fallback = arg(a, 1, "default");
  const Value* found = key->is_string() ? self.dict->find(key->s) : nullptr;
  return found ? *found : (fallback ? *fallback : Value::none());
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string method) : self_(std::move(self)), method_(std::move(method)) {}
  Value call(Interpreter& in, CallArgs& args) override {
    return self_.is_string() ? string_method(in, self_.s, method_, args) : dict_method(self_, method_, args);
  }
  std::string name() const override { return std::string(type_name(self_)) + "." + method_; }

 private:
  Value self_;
  std::string method_;
};

bool is_string_method(const std::string& m) {
  static const char* const kMethods[] = {
      "strip",   "lstrip", "rstrip",  "split", "splitlines", "startswith",   "endswith",     "upper",
      "lower",   "title",  "capitalize", "replace", "find", "rfind", "index", "rindex",       "count",
      "join",    "format", "removeprefix", "removesuffix", "isdigit", "isalpha", "isalnum", "isspace",
      "islower", "isupper"};
  for (const char* x : kMethods)
    if (m == x) return true;
  return false;
}

bool is_list_mutator(const std::string& m) {
  static const char* const kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  for (const char* x : kMutators)
    if (m == x) return true;
  return false;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::Dict:
      if (name == "items" || name == "keys" || name == "values" || name == "get")
        return Value::callable(std::make_shared<BoundMethod>(obj, name));
      if (const Value* v = obj.dict->find(name)) return *v;
      return missing_attribute(obj, name);
    case Kind::Namespace:
      if (const Value* v = obj.dict->find(name)) return *v;
      return missing_attribute(obj, name);
    case Kind::String:
      if (is_string_method(name)) return Value::callable(std::make_shared<BoundMethod>(obj, name));
      return missing_attribute(obj, name);
    case Kind::List:
      if (is_list_mutator(name))
        return Value::undefined(std::string("access to attribute '") + name + "' of '" + type_name(obj) + "' object is unsafe.");
      return missing_attribute(obj, name);
    default: return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (key.is_integral() && (obj.kind == Kind::List || obj.kind == Kind::String)) {
    int64_t index = key.as_int();
    if (obj.kind == Kind::List) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return obj.items()[static_cast<size_t>(index)];
    } else {
      const std::u32string cps = utf8_to_u32(obj.s);
      const auto n = static_cast<int64_t>(cps.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return Value::string(u32_to_utf8(cps.substr(static_cast<size_t>(index), 1)));
    }
    return Value::undefined(object_type_repr(obj) + " has no element " + std::to_string(key.as_int()));
  }
  if (obj.kind == Kind::Dict && key.is_string()) {
    if (const Value* v = obj.dict->find(key.s)) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.s);  // jinja2 falls back to the attribute
  return Value::undefined(object_type_repr(obj) + " has no element " + to_repr(key));
}

Value get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_integral()) fail("slice indices must be integers or None");
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) fail("slice step cannot be zero");
  std::u32string cps;
  int64_t n = 0;
  if (obj.kind == Kind::String) {
    cps = utf8_to_u32(obj.s);
    n = static_cast<int64_t>(cps.size());
  } else if (obj.kind == Kind::List) {
    n = static_cast<int64_t>(obj.items().size());
  } else {
    fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
  }
  // CPython's PySlice_AdjustIndices
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t x = v.as_int();
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<size_t> picks;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
    in.step();
    picks.push_back(static_cast<size_t>(k));
  }
  if (obj.kind == Kind::String) {
    std::u32string out;
    for (size_t k : picks) out.push_back(cps[k]);
    return Value::string(u32_to_utf8(out));
  }
  std::vector<Value> out;
  for (size_t k : picks) out.push_back(obj.items()[k]);
  return Value::list_of(std::move(out), obj.tuple);
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || equals(a, b);
  if (op == ">=") return less_than(b, a) || equals(a, b);
  // `a in b` / `a not in b`
  bool found = false;
  switch (b.kind) {
    case Kind::Undefined: break;
    case Kind::String:
      if (!a.is_string()) fail(std::string("'in <string>' requires string as left operand, not ") + type_name(a));
      found = b.s.find(a.s) != std::string::npos;
      break;
    case Kind::List:
      for (const Value& x : b.items())
        if (equals(a, x)) found = true;
      break;
    case Kind::Dict:
    case Kind::Namespace: found = a.is_string() && b.dict->find(a.s) != nullptr; break;
    default: fail(std::string("argument of type '") + type_name(b) + "' is not iterable");
  }
  return op == "in" ? found : !found;
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    in.check_string_size(s.size());
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) fail(a.s);
  if (b.is_undefined()) fail(b.s);
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_integral() && b.is_integral();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_double(), fy = b.as_double();
    if (op == "+") return ints ? Value::integer(checked_add(x, y)) : Value::number(fx + fy);
    if (op == "-") return ints ? Value::integer(checked_sub(x, y)) : Value::number(fx - fy);
    if (op == "*") return ints ? Value::integer(checked_mul(x, y)) : Value::number(fx * fy);
    if (op == "/") {
      if (fy == 0) fail("division by zero");
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward negative infinity
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (fy == 0) fail("float division by zero");
      if (op == "//") return Value::number(std::floor(fx / fy));
      double m = std::fmod(fx, fy);
      if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
      return Value::number(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t acc = 1;
        for (int64_t k = 0; k < y; ++k) {
          in.step();
          acc = checked_mul(acc, x);
        }
        return Value::integer(acc);
      }
      return Value::number(std::pow(fx, fy));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      in.check_string_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.kind == Kind::List && b.kind == Kind::List) {
      in.check_list_size(a.items().size() + b.items().size());
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list_of(std::move(items), a.tuple);
    }
    if (a.is_string() || a.kind == Kind::List)
      fail(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  }
  if (op == "*" && (a.is_string() || a.kind == Kind::List || b.is_string() || b.kind == Kind::List)) {
    const Value& seq = (a.is_string() || a.kind == Kind::List) ? a : b;
    const Value& count = &seq == &a ? b : a;
    if (!count.is_integral()) fail(std::string("can't multiply sequence by non-int of type '") + std::string(type_name(count)) + "'");
    const int64_t times = std::max<int64_t>(0, count.as_int());
    if (seq.is_string()) {
      in.check_string_size(static_cast<size_t>(times) * seq.s.size());
      std::string out;
      for (int64_t k = 0; k < times; ++k) out += seq.s;
      return Value::string(std::move(out));
    }
    in.check_list_size(static_cast<size_t>(times) * seq.items().size());
    std::vector<Value> out;
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.items().begin(), seq.items().end());
    return Value::list_of(std::move(out), seq.tuple);
  }
  if (op == "%" && a.is_string()) fail("printf-style string formatting ('%') is not supported in chat templates");
  unsupported_operands(op, a, b);
}

}  // namespace ga::chat
