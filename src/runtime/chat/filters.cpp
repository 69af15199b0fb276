// Jinja filters, tests and globals that chat templates use, with jinja2's (and HF's) semantics.
//
// Each filter mirrors its jinja2 definition, including how it treats Undefined (trim/upper/string render it as
// "", length is 0, list/join/items see an empty sequence, tojson refuses it). `tojson` is HF's version:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=None, sort_keys=False), keys in insertion order
// and no HTML escaping, because that is what every chat template was written against. Filters whose jinja2
// result is a generator (map, select, ...) return lists: templates only ever consume them with |list, |join
// or a loop. A filter or test not listed here is rejected when the template is parsed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>

#include "runtime/chat/interpreter.h"
#include "runtime/chat/text.h"

namespace ga::chat {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

const Value* arg(CallArgs& a, size_t index, const char* name) {
  if (index < a.positional.size()) return &a.positional[index];
  for (auto& [k, v] : a.keyword)
    if (k == name) return &v;
  return nullptr;
}

bool bool_arg(CallArgs& a, size_t index, const char* name, bool fallback) {
  const Value* v = arg(a, index, name);
  return v ? v->truthy() : fallback;
}

// jinja2's make_attrgetter: "a.b.0" walks attributes and integer items.
Value attribute_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) fail(cur.s);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos)
      cur = get_item(cur, Value::integer(std::stoll(part)));
    else
      cur = get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(ascii_lower(v.s)) : v;
}

// select/reject/selectattr/rejectattr: `args` after `skip` positional ones name a test and its arguments.
std::vector<Value> select_items(Interpreter& in, const Value& seq, CallArgs& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    const Value* a = arg(args, 0, "attribute");
    if (!a || !a->is_string()) fail("selectattr/rejectattr need an attribute name");
    attribute = a->s;
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) fail("the test name must be a string");
    test = args.positional[next].s;
    if (!is_known_test(test)) fail(std::string("no test named '") + test + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next + 1), args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(seq)) {
    in.step();
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool pass = test.empty() ? subject.truthy() : apply_test(in, test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& fallback, int64_t base) {
  switch (v.kind) {
    case Kind::Bool:
    case Kind::Int: return Value::integer(v.as_int());
    case Kind::Float:
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(v.f));
    case Kind::String: {
      const std::string t = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (!t.empty() && end && *end == 0 && errno == 0) return Value::integer(x);
      const double d = std::strtod(t.c_str(), &end);  // jinja2 then tries float(value)
      if (!t.empty() && end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
      return fallback;
    }
    default: return fallback;
  }
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    const std::string t = py_strip(v.s, nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == 0) return Value::number(d);
  }
  return fallback;
}

using FilterFn = std::function<Value(Interpreter&, const Value&, CallArgs&)>;

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> f;
    auto text_filter = [](std::string (*fn)(std::string_view)) {
      return [fn](Interpreter&, const Value& v, CallArgs&) { return Value::string(fn(to_str(v))); };
    };
    f["trim"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* chars = arg(a, 0, "chars");
      return Value::string(py_strip(to_str(v), (chars && chars->is_string()) ? &chars->s : nullptr, true, true));
    };
    f["upper"] = text_filter(&ascii_upper);
    f["lower"] = text_filter(&ascii_lower);
    f["capitalize"] = text_filter(&py_capitalize);
    f["title"] = text_filter(&jinja_title);
    f["string"] = [](Interpreter&, const Value& v, CallArgs&) { return Value::string(to_str(v)); };
    f["safe"] = [](Interpreter&, const Value& v, CallArgs&) { return v; };
    f["escape"] = f["e"] = [](Interpreter&, const Value& v, CallArgs&) { return Value::string(html_escape(to_str(v))); };
    f["length"] = f["count"] = [](Interpreter&, const Value& v, CallArgs&) { return Value::integer(length_of(v)); };
    f["wordcount"] = [](Interpreter&, const Value& v, CallArgs&) {
      return Value::integer(static_cast<int64_t>(py_split(to_str(v), nullptr, -1).size()));
    };
    f["first"] = [](Interpreter&, const Value& v, CallArgs&) {
      const std::vector<Value> xs = iterate(v);
      return xs.empty() ? Value::undefined("No first item, sequence was empty.") : xs.front();
    };
    f["last"] = [](Interpreter&, const Value& v, CallArgs&) {
      const std::vector<Value> xs = iterate(v);
      return xs.empty() ? Value::undefined("No last item, sequence was empty.") : xs.back();
    };
    f["list"] = [](Interpreter&, const Value& v, CallArgs&) { return Value::list_of(iterate(v)); };
    f["join"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      const Value* sep = arg(a, 0, "d");
      const Value* attribute = arg(a, 1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v)) {
        out += (first ? "" : (sep ? to_str(*sep) : "")) +
               to_str(attribute ? attribute_path(x, to_str(*attribute)) : x);
        first = false;
        in.check_string_size(out.size());
      }
      return Value::string(std::move(out));
    };
    f["default"] = f["d"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* fallback = arg(a, 0, "default_value");
      const bool boolean = bool_arg(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value::string("");
      return v;
    };
    f["tojson"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
      const Value* indent = arg(a, 1, "indent");
      const Value* separators = arg(a, 2, "separators");
      if (separators && !separators->is_none()) fail("tojson(separators=...) is not supported");
      if (indent && !indent->is_none() && !indent->is_integral()) fail("tojson(indent=...) must be an integer");
      std::string out = to_json(v, indent && !indent->is_none() ? static_cast<int>(indent->as_int()) : -1,
                                bool_arg(a, 0, "ensure_ascii", false), bool_arg(a, 3, "sort_keys", false));
      in.check_string_size(out.size());
      return Value::string(std::move(out));
    };
    f["int"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* fallback = arg(a, 0, "default");
      const Value* base = arg(a, 1, "base");
      return to_int(v, fallback ? *fallback : Value::integer(0), base && base->is_integral() ? base->as_int() : 10);
    };
    f["float"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* fallback = arg(a, 0, "default");
      return to_float(v, fallback ? *fallback : Value::number(0.0));
    };
    f["abs"] = [](Interpreter&, const Value& v, CallArgs&) {
      if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
      if (!v.is_integral()) fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    };
    f["round"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* precision = arg(a, 0, "precision");
      const Value* method = arg(a, 1, "method");
      if (!v.is_number()) fail(std::string("type ") + type_name(v) + " doesn't define __round__ method");
      const double scale = std::pow(10.0, precision && precision->is_integral() ? precision->as_int() : 0);
      const double x = v.as_double() * scale;
      const std::string how = method ? to_str(*method) : "common";
      double r;
      if (how == "ceil") r = std::ceil(x);
      else if (how == "floor") r = std::floor(x);
      else if (how == "common") r = std::nearbyint(x);  // Python's round(): half to even
      else fail("method must be common, ceil or floor");
      return Value::number(r / scale);
    };
    f["items"] = [](Interpreter&, const Value& v, CallArgs&) {
      if (v.is_undefined()) return Value::list_of({});
      if (v.kind != Kind::Dict && v.kind != Kind::Namespace) fail("Can only get item pairs from a mapping.");
      std::vector<Value> out;
      for (const auto& [k, x] : v.dict->entries) out.push_back(Value::list_of({Value::string(k), x}, true));
      return Value::list_of(std::move(out));
    };
    f["dictsort"] = [](Interpreter&, const Value& v, CallArgs& a) {
      if (v.kind != Kind::Dict) fail("dictsort: can only sort a mapping");
      const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
      const Value* by = arg(a, 1, "by");
      const bool by_value = by && to_str(*by) == "value";
      const bool reverse = bool_arg(a, 2, "reverse", false);
      std::vector<Value> out;
      for (const auto& [k, x] : v.dict->entries) out.push_back(Value::list_of({Value::string(k), x}, true));
      std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
        const size_t i = by_value ? 1 : 0;
        const Value kp = sort_key(p.items()[i], case_sensitive), kq = sort_key(q.items()[i], case_sensitive);
        return reverse ? less_than(kq, kp) : less_than(kp, kq);
      });
      return Value::list_of(std::move(out));
    };
    f["replace"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      const Value* old = arg(a, 0, "old");
      const Value* repl = arg(a, 1, "new");
      const Value* count = arg(a, 2, "count");
      if (!old || !repl) fail("replace() needs 'old' and 'new'");
      std::string out = py_replace(to_str(v), to_str(*old), to_str(*repl),
                                   count && count->is_integral() ? count->as_int() : -1);
      in.check_string_size(out.size());
      return Value::string(std::move(out));
    };
    f["indent"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value* width = arg(a, 0, "width");
      const std::string pad = width && width->is_string() ? width->s
                              : std::string(static_cast<size_t>(width ? std::max<int64_t>(0, width->as_int()) : 4), ' ');
      const bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
      const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
      std::string out;
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k > 0) out += std::string("\n") + ((blank || !lines[k].empty()) ? pad : "");
        out += lines[k];
      }
      return Value::string(first ? pad + out : out);
    };
    f["reverse"] = [](Interpreter&, const Value& v, CallArgs&) {
      if (v.is_string()) {
        std::u32string cps = utf8_to_u32(v.s);
        std::reverse(cps.begin(), cps.end());
        return Value::string(u32_to_utf8(cps));
      }
      std::vector<Value> xs = iterate(v);
      std::reverse(xs.begin(), xs.end());
      return Value::list_of(std::move(xs));
    };
    f["sort"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const bool reverse = bool_arg(a, 0, "reverse", false);
      const bool case_sensitive = bool_arg(a, 1, "case_sensitive", false);
      const Value* attribute = arg(a, 2, "attribute");
      std::vector<Value> xs = iterate(v);
      auto key = [&](const Value& x) {
        return sort_key(attribute ? attribute_path(x, to_str(*attribute)) : x, case_sensitive);
      };
      std::stable_sort(xs.begin(), xs.end(), [&](const Value& p, const Value& q) {
        return reverse ? less_than(key(q), key(p)) : less_than(key(p), key(q));
      });
      return Value::list_of(std::move(xs));
    };
    f["unique"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
      const Value* attribute = arg(a, 1, "attribute");
      std::vector<Value> out, seen;
      for (const Value& x : iterate(v)) {
        const Value k = sort_key(attribute ? attribute_path(x, to_str(*attribute)) : x, case_sensitive);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
          seen.push_back(k);
          out.push_back(x);
        }
      }
      return Value::list_of(std::move(out));
    };
    auto extreme = [](bool want_max) {
      return [want_max](Interpreter&, const Value& v, CallArgs& a) {
        const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
        const Value* attribute = arg(a, 1, "attribute");
        const std::vector<Value> xs = iterate(v);
        if (xs.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        auto key = [&](const Value& x) {
          return sort_key(attribute ? attribute_path(x, to_str(*attribute)) : x, case_sensitive);
        };
        size_t best = 0;
        for (size_t k = 1; k < xs.size(); ++k)
          if (want_max ? less_than(key(xs[best]), key(xs[k])) : less_than(key(xs[k]), key(xs[best]))) best = k;
        return xs[best];
      };
    };
    f["max"] = extreme(true);
    f["min"] = extreme(false);
    f["sum"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      const Value* attribute = arg(a, 0, "attribute");
      const Value* start = arg(a, 1, "start");
      Value total = start ? *start : Value::integer(0);
      for (const Value& x : iterate(v))
        total = binary_op(in, "+", total, attribute ? attribute_path(x, to_str(*attribute)) : x);
      return total;
    };
    f["map"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      std::vector<Value> out;
      const Value* attribute = nullptr;
      for (auto& [k, x] : a.keyword)
        if (k == "attribute") attribute = &x;
      if (attribute) {
        const Value* fallback = nullptr;
        for (auto& [k, x] : a.keyword)
          if (k == "default") fallback = &x;
        for (const Value& x : iterate(v)) {
          Value r = attribute_path(x, to_str(*attribute));
          out.push_back(r.is_undefined() && fallback ? *fallback : r);
        }
        return Value::list_of(std::move(out));
      }
      if (a.positional.empty() || !a.positional[0].is_string()) fail("map() needs a filter name or attribute=");
      const std::string name = a.positional[0].s;
      if (!is_known_filter(name)) fail(std::string("no filter named '") + name + "'");
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      for (const Value& x : iterate(v)) {
        CallArgs copy = rest;
        out.push_back(apply_filter(in, name, x, copy));
      }
      return Value::list_of(std::move(out));
    };
    f["select"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::list_of(select_items(in, v, a, false, true));
    };
    f["reject"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::list_of(select_items(in, v, a, false, false));
    };
    f["selectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::list_of(select_items(in, v, a, true, true));
    };
    f["rejectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::list_of(select_items(in, v, a, true, false));
    };
    return f;
  }();
  return table;
}

using TestFn = std::function<bool(Interpreter&, const Value&, CallArgs&)>;

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    auto kind_test = [](std::function<bool(const Value&)> pred) {
      return [pred](Interpreter&, const Value& v, CallArgs&) { return pred(v); };
    };
    auto other = [](CallArgs& a) -> const Value& {
      if (a.positional.empty()) fail("this test needs an argument");
      return a.positional[0];
    };
    t["defined"] = kind_test([](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = kind_test([](const Value& v) { return v.is_undefined(); });
    t["none"] = kind_test([](const Value& v) { return v.is_none(); });
    t["boolean"] = kind_test([](const Value& v) { return v.kind == Kind::Bool; });
    t["true"] = kind_test([](const Value& v) { return v.kind == Kind::Bool && v.b; });
    t["false"] = kind_test([](const Value& v) { return v.kind == Kind::Bool && !v.b; });
    t["integer"] = kind_test([](const Value& v) { return v.kind == Kind::Int; });
    t["float"] = kind_test([](const Value& v) { return v.kind == Kind::Float; });
    t["number"] = kind_test([](const Value& v) { return v.is_number(); });
    t["string"] = kind_test([](const Value& v) { return v.is_string(); });
    t["mapping"] = kind_test([](const Value& v) { return v.kind == Kind::Dict; });
    t["callable"] = kind_test([](const Value& v) { return v.kind == Kind::Callable; });
    // jinja2's Undefined defines __iter__ and __len__/__getitem__, so it is iterable and a sequence.
    t["iterable"] = kind_test([](const Value& v) {
      return v.is_undefined() || v.is_string() || v.kind == Kind::List || v.kind == Kind::Dict;
    });
    t["sequence"] = t["iterable"];
    t["lower"] = kind_test([](const Value& v) { return to_str(v) == ascii_lower(to_str(v)); });
    t["upper"] = kind_test([](const Value& v) { return to_str(v) == ascii_upper(to_str(v)); });
    t["odd"] = kind_test([](const Value& v) { return v.is_integral() && v.as_int() % 2 != 0; });
    t["even"] = kind_test([](const Value& v) { return v.is_integral() && v.as_int() % 2 == 0; });
    t["divisibleby"] = [other](Interpreter&, const Value& v, CallArgs& a) {
      const Value& n = other(a);
      if (!n.is_integral() || !v.is_integral()) fail("divisibleby needs integers");
      if (n.as_int() == 0) fail("integer division or modulo by zero");
      return v.as_int() % n.as_int() == 0;
    };
    t["sameas"] = [other](Interpreter&, const Value& v, CallArgs& a) {
      const Value& x = other(a);
      if (v.kind != x.kind) return false;
      if (v.kind == Kind::None || v.kind == Kind::Undefined) return true;
      if (v.kind == Kind::Bool) return v.b == x.b;
      if (v.kind == Kind::List) return v.list == x.list;
      if (v.kind == Kind::Dict || v.kind == Kind::Namespace) return v.dict == x.dict;
      return equals(v, x);
    };
    auto cmp = [other](const char* op) {
      return [op, other](Interpreter&, const Value& v, CallArgs& a) { return compare_op(op, v, other(a)); };
    };
    t["eq"] = t["equalto"] = t["=="] = cmp("==");
    t["ne"] = t["!="] = cmp("!=");
    t["lt"] = t["lessthan"] = t["<"] = cmp("<");
    t["le"] = t["<="] = cmp("<=");
    t["gt"] = t["greaterthan"] = t[">"] = cmp(">");
    t["ge"] = t[">="] = cmp(">=");
    t["in"] = [other](Interpreter&, const Value& v, CallArgs& a) { return compare_op("in", v, other(a)); };
    return t;
  }();
  return table;
}

// ---- globals ----

class Builtin : public Callable {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Value call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

Dict keyword_dict(CallArgs& a, const char* what) {
  Dict d;
  for (const Value& p : a.positional) {  // dict(mapping) / namespace(mapping)
    if (p.kind != Kind::Dict && p.kind != Kind::Namespace) fail(std::string(what) + "() takes a mapping or keywords");
    for (const auto& [k, v] : p.dict->entries) d.set(k, v);
  }
  for (auto& [k, v] : a.keyword) d.set(k, v);
  return d;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filters().count(name) != 0; }
bool is_known_test(const std::string& name) { return tests().count(name) != 0; }

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(std::string("no filter named '") + name + "'");
  return it->second(in, input, args);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail(std::string("no test named '") + name + "'");
  return it->second(in, v, args);
}

void add_builtin_globals(Scope& scope) {
  auto add = [&](const std::string& name, Builtin::Fn fn) {
    scope.set(name, Value::callable(std::make_shared<Builtin>(name, std::move(fn))));
  };
  add("range", [](Interpreter& in, CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& v : a.positional)
      if (!v.is_integral()) fail(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
    if (a.positional.size() == 1) stop = a.positional[0].as_int();
    else if (a.positional.size() == 2 || a.positional.size() == 3) {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() == 3) step = a.positional[2].as_int();
    } else {
      fail("range expected 1 to 3 arguments");
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / step));
    if (count > kMaxRange)
      throw LimitError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) {
      in.step();
      out.push_back(Value::integer(x));
    }
    return Value::list_of(std::move(out));
  });
  add("dict", [](Interpreter&, CallArgs& a) { return Value::dict_of(keyword_dict(a, "dict")); });
  add("namespace", [](Interpreter& in, CallArgs& a) {
    Value ns = Value::namespace_of(keyword_dict(a, "namespace"));
    in.track_namespace(ns.dict);
    return ns;
  });
  add("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    throw RaisedError(a.positional.empty() ? std::string() : to_str(a.positional[0]));
  });
  add("strftime_now", [](Interpreter&, CallArgs& a) {
    if (a.positional.empty() || !a.positional[0].is_string()) fail("strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.positional[0].s.c_str(), &local);
    return Value::string(std::string(buf, n));
  });
}

}  // namespace ga::chat
