// Command-line parsing for gpu-accel (see args.h).
//
// Numbers go through std::from_chars: locale-independent and exact about what it consumed, so
// "1e3" is a float, "0x10" is not an integer, and trailing garbage is caught.
#include "args.h"

#include <charconv>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

namespace ga::cli {

void require(bool cond, const std::string& message) {
  if (!cond) throw UsageError(message);
}

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::string current;
  for (char c : names) {
    if (c == ',') {
      if (!current.empty()) out.push_back(current);
      current.clear();
    } else if (c != ' ') {
      current += c;
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

template <typename T>
std::string to_text(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int64_t parse_int(const std::string& text, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  require(ec != std::errc::result_out_of_range, what + " is out of range: '" + text + "'");
  require(ec == std::errc() && ptr == end && !text.empty(), what + " expects an integer, got '" + text + "'");
  return v;
}

uint64_t parse_uint(const std::string& text, const std::string& what) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  require(ec != std::errc::result_out_of_range, what + " is out of range: '" + text + "'");
  require(ec == std::errc() && ptr == end && !text.empty(),
          what + " expects a non-negative integer, got '" + text + "'");
  return v;
}

float parse_float(const std::string& text, const std::string& what) {
  float v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  require(ec != std::errc::result_out_of_range, what + " is out of range: '" + text + "'");
  require(ec == std::errc() && ptr == end && !text.empty() && std::isfinite(v),
          what + " expects a number, got '" + text + "'");
  return v;
}

ArgParser::ArgParser(std::string command, std::string synopsis, std::string about)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

void ArgParser::add(const std::string& names, const std::string& metavar, const std::string& help,
                    std::string default_text, std::function<void(const std::string&, const std::string&)> set) {
  Option o;
  o.names = split_names(names);
  o.metavar = metavar;
  o.help = help;
  o.default_text = std::move(default_text);
  o.set = std::move(set);
  options_.push_back(std::move(o));
}

void ArgParser::flag(const std::string& names, bool* out, const std::string& help) {
  add(names, "", help, "", [out](const std::string&, const std::string&) { *out = true; });
}

void ArgParser::option(const std::string& names, std::string* out, const std::string& metavar,
                       const std::string& help) {
  add(names, metavar, help, out->empty() ? "" : "'" + *out + "'",
      [out](const std::string&, const std::string& v) { *out = v; });
}

void ArgParser::option(const std::string& names, int64_t* out, const std::string& metavar, const std::string& help) {
  add(names, metavar, help, to_text(*out), [out](const std::string& n, const std::string& v) { *out = parse_int(v, n); });
}

void ArgParser::option(const std::string& names, int32_t* out, const std::string& metavar, const std::string& help) {
  add(names, metavar, help, to_text(*out), [out](const std::string& n, const std::string& v) {
    const int64_t wide = parse_int(v, n);
    require(wide >= std::numeric_limits<int32_t>::min() && wide <= std::numeric_limits<int32_t>::max(),
            n + " is out of range: '" + v + "'");
    *out = static_cast<int32_t>(wide);
  });
}

void ArgParser::option(const std::string& names, uint64_t* out, const std::string& metavar,
                       const std::string& help) {
  add(names, metavar, help, "", [out](const std::string& n, const std::string& v) { *out = parse_uint(v, n); });
}

void ArgParser::option(const std::string& names, float* out, const std::string& metavar, const std::string& help) {
  add(names, metavar, help, to_text(*out),
      [out](const std::string& n, const std::string& v) { *out = parse_float(v, n); });
}

void ArgParser::option(const std::string& names, std::vector<std::string>* out, const std::string& metavar,
                       const std::string& help) {
  add(names, metavar, help, "", [out](const std::string&, const std::string& v) { out->push_back(v); });
}

void ArgParser::positional(const std::string& metavar, std::string* out, const std::string& help) {
  positionals_.push_back({metavar, help, out});
}

ArgParser::Option* ArgParser::find(std::string_view name) {
  for (auto& o : options_) {
    for (const auto& n : o.names) {
      if (n == name) return &o;
    }
  }
  return nullptr;
}

bool ArgParser::given(std::string_view name) const {
  for (const auto& o : options_) {
    for (const auto& n : o.names) {
      if (n == name) return o.seen;
    }
  }
  return false;
}

bool ArgParser::parse(int argc, char** argv, int first) {
  size_t next_positional = 0;
  bool only_positionals = false;  // after "--"
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!only_positionals && (arg == "-h" || arg == "--help")) {
      std::cout << help();
      return false;
    }
    if (!only_positionals && arg == "--") {
      only_positionals = true;
      continue;
    }
    if (!only_positionals && arg.size() > 1 && arg[0] == '-') {
      // "--name=value" or "--name value"
      std::string name = arg;
      std::string value;
      bool inline_value = false;
      const size_t eq = arg.find('=');
      if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inline_value = true;
      }
      Option* o = find(name);
      require(o != nullptr, "unknown option '" + name + "' for '" + command_ + "'");
      if (o->metavar.empty()) {
        require(!inline_value, "option " + name + " takes no value");
      } else if (!inline_value) {
        require(i + 1 < argc, "option " + name + " needs a value (" + o->metavar + ")");
        value = argv[++i];
      }
      o->set(name, value);
      o->seen = true;
      continue;
    }
    require(next_positional < positionals_.size(), "unexpected argument '" + arg + "' for '" + command_ + "'");
    *positionals_[next_positional++].out = arg;
  }
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: gpu-accel " << command_ << " " << synopsis_ << "\n\n" << about_ << "\n";
  if (!positionals_.empty()) {
    os << "\narguments:\n";
    for (const auto& p : positionals_) os << "  " << p.metavar << "\n      " << p.help << "\n";
  }
  os << "\noptions:\n";
  for (const auto& o : options_) {
    os << "  ";
    for (size_t i = 0; i < o.names.size(); ++i) os << (i ? ", " : "") << o.names[i];
    if (!o.metavar.empty()) os << " " << o.metavar;
    os << "\n      " << o.help;
    if (!o.default_text.empty()) os << " (default: " << o.default_text << ")";
    os << "\n";
  }
  os << "  -h, --help\n      show this help\n";
  return os.str();
}

}  // namespace ga::cli
