// The value type of the chat-template interpreter: Python's objects as Jinja templates see them.
//
// Templates only ever hold a few kinds of data (the request's messages and tools as JSON, literals, loop state),
// so one small tagged struct covers them: undefined, none, bool, int, float, string, list/tuple, dict, namespace
// and callables (macros, bound methods, globals). Lists and dicts are shared, not copied, when a value is passed
// around: Jinja's sandbox forbids mutating them, so sharing is safe and `messages[i]` stays O(1). The one mutable
// object is namespace(), whose attributes `{% set ns.x = ... %}` changes in place, as in Jinja.
//
// Undefined carries the reason it is undefined ("'foo' is undefined"), which becomes the error message when a
// template uses it in a way Jinja's default Undefined rejects (attribute access, arithmetic, calls).
// Dicts keep insertion order (Python dicts do, and tojson output depends on it); keys are strings, which is all
// JSON and chat templates produce.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ga::chat {

class Interpreter;
struct Value;

// A template runtime failure (Python's TypeError, UndefinedError, ...): the interpreter adds the location.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
  int line = 0, col = 0;  // where in the template; 0 until the innermost node that sees it fills it in
};
// raise_exception(msg) from the template: its message is passed on unchanged.
struct RaisedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A resource bound was hit (output size, steps, recursion, list or string size).
struct LimitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& message);

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

struct Dict {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);  // replaces in place or appends
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interp, CallArgs& args) = 0;
  virtual std::string name() const = 0;
};

struct Value {
  Kind kind = Kind::Undefined;
  bool tuple = false;  // a List that Python would hold as a tuple (repr "(a, b)")
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String: the text; Undefined: why it is undefined
  std::shared_ptr<const std::vector<Value>> list;
  std::shared_ptr<Dict> dict;  // Dict and Namespace
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string reason);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value list_of(std::vector<Value> items, bool is_tuple = false);
  static Value dict_of(Dict d);
  static Value namespace_of(Dict d);
  static Value callable(std::shared_ptr<Callable> c);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_mapping() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }  // Python: bool is an int

  bool truthy() const;
  const std::vector<Value>& items() const;  // List only
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }
};

const char* type_name(const Value& v);  // Python's type name: 'str', 'int', 'NoneType', 'dict', ...

std::string to_str(const Value& v);   // Python str(); undefined is ""
std::string to_repr(const Value& v);  // Python repr()
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);  // Python '<'; fails on unorderable types
// Python iteration: list items, dict keys, string characters; undefined is empty; anything else fails.
std::vector<Value> iterate(const Value& v);
int64_t length_of(const Value& v);  // len(); undefined is 0

// json.dumps(v, ensure_ascii, indent (< 0: none), sort_keys) with Python's separators.
std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace ga::chat
