// A small command-line parser shared by the gpu-accel subcommands.
//
// Each command declares its options (bound to variables it owns), then calls parse(). Values are
// parsed strictly: "12x", "", "nan" and out-of-type numbers are usage errors, never silently 0, so a
// typo can't turn into a surprising run. Range checks that depend on meaning (top-p in [0, 1]) are
// the command's, through require(). Usage errors are thrown as UsageError, which main() prints as
// one line and turns into exit code 2.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ga::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws UsageError(message) unless cond.
void require(bool cond, const std::string& message);

class ArgParser {
 public:
  // command: "run"; synopsis: "-m MODEL -p PROMPT [options]"; about: one paragraph for --help.
  ArgParser(std::string command, std::string synopsis, std::string about);

  // names: "-m,--model" (comma-separated spellings). The bound variable keeps its value (the
  // default, shown in --help) unless the option is given.
  void flag(const std::string& names, bool* out, const std::string& help);
  void option(const std::string& names, std::string* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, int64_t* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, int32_t* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, uint64_t* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, float* out, const std::string& metavar, const std::string& help);
  // Repeatable: each occurrence appends.
  void option(const std::string& names, std::vector<std::string>* out, const std::string& metavar,
              const std::string& help);
  // Positional arguments, in order; an optional one may be left out.
  void positional(const std::string& metavar, std::string* out, const std::string& help);

  // Parses argv[first..argc). Returns false when --help was asked for (help printed to stdout):
  // the command then exits 0.
  bool parse(int argc, char** argv, int first = 2);

  // Whether an option was given (any spelling, e.g. "--seed").
  bool given(std::string_view name) const;
  std::string help() const;
  const std::string& command() const { return command_; }

 private:
  struct Option {
    std::vector<std::string> names;
    std::string metavar;  // empty: a flag without a value
    std::string help;
    std::string default_text;
    std::function<void(const std::string& name, const std::string& value)> set;
    bool seen = false;
  };
  struct Positional {
    std::string metavar;
    std::string help;
    std::string* out;
  };
  std::string command_, synopsis_, about_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;

  void add(const std::string& names, const std::string& metavar, const std::string& help,
           std::string default_text, std::function<void(const std::string&, const std::string&)> set);
  Option* find(std::string_view name);
};

// Strict number parsing (the whole text must be the number); UsageError naming `what` otherwise.
int64_t parse_int(const std::string& text, const std::string& what);
uint64_t parse_uint(const std::string& text, const std::string& what);
float parse_float(const std::string& text, const std::string& what);

}  // namespace ga::cli
