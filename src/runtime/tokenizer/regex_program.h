// The compiled form of a Regex: a program for a backtracking virtual machine (regex_match.cpp), produced
// by the parser/compiler in regex_compile.cpp.
//
// Why a VM program rather than walking the syntax tree: the VM keeps its backtrack points on an explicit
// heap stack, so matching a long run (`\s+` over 100 KB of spaces) never recurses per code point and
// cannot overflow the C++ stack. Only lookaround and atomic groups start a nested VM run, so recursion
// depth is bounded by the pattern's nesting, not by the input.
//
// A quantifier whose operand matches exactly one code point (`\p{L}+`, `[^\s\p{L}\p{N}]+`, ` ?`) compiles to
// one Repeat instruction that counts the run directly and backtracks by decrementing a counter: this is the
// hot path of every pre-tokenizer pattern, and it is where the VM memoizes failed loop entries so that
// patterns like `\s+$` stay linear on long whitespace runs instead of quadratic.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "runtime/tokenizer/unicode.h"

namespace ga::text::regex_detail {

// One member test of a bracket class or a class escape (\s, \p{L}, ...).
struct ClassItem {
  enum class Kind : uint8_t { Range, Category, WhiteSpace, Script };
  Kind kind = Kind::Range;
  bool negated = false;  // \S, \P{L}, \p{^L}, \W, \D
  char32_t lo = 0, hi = 0;
  CategoryMask mask = 0;
  int script = 0;
};

struct CharClass {
  std::vector<ClassItem> items;
  bool negated = false;             // [^...]
  bool ignore_case = false;         // compiled inside (?i)
  std::array<uint64_t, 2> ascii{};  // final membership of U+0000..U+007F, filled by finalize()

  void finalize();  // call once the items are complete
  bool contains(char32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    return contains_slow(cp);
  }
  bool contains_slow(char32_t cp) const;

 private:
  bool items_match(char32_t cp) const;
};

// A test of exactly one code point: a literal, '.', or a class.
struct Atom {
  enum class Kind : uint8_t { Char, Any, Class };
  Kind kind = Kind::Char;
  bool ignore_case = false;
  char32_t cp = 0;   // Char: the literal (case-folded when ignore_case)
  uint32_t cls = 0;  // Class: index into Program::classes
};

enum class Op : uint8_t {
  One,             // match atoms[x] at pos, advance one
  Split,           // try x first; on failure try y (flag: a repeat's branch point, whose failures are memoized)
  Jmp,             // continue at x
  Repeat,          // atoms[x] repeated [min, max] times (greedy, or possessive when flag); see regex_match.cpp
  Look,            // lookahead: run sub-program at pc + 1; flag = negative; continue at y
  Atomic,          // run sub-program at pc + 1, keep only its first match end, continue at y
  LineStart,       // ^  (Oniguruma: start of text or after '\n')
  LineEnd,         // $  (end of text or before '\n')
  TextStart,       // \A
  TextEnd,         // \z
  TextEndNewline,  // \Z (end, or before a final '\n')
  WordBoundary,    // \b (flag = negated: \B)
  Match,           // end of the program or of a sub-program
};

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

struct Inst {
  Op op = Op::Match;
  bool flag = false;
  uint32_t x = 0, y = 0;
  uint32_t min = 0, max = 0;  // Repeat bounds (max may be kUnbounded)
  uint32_t memo = 0;          // Repeat: index of its failed-entry memo slot
};

struct Program {
  std::string pattern;
  std::vector<Inst> insts;  // entry point is 0
  std::vector<CharClass> classes;
  std::vector<Atom> atoms;
  uint32_t memo_slots = 0;  // number of Repeat instructions with an unbounded max

  bool atom_matches(const Atom& atom, char32_t cp) const {
    switch (atom.kind) {
      case Atom::Kind::Char:
        return atom.ignore_case ? simple_case_fold(cp) == atom.cp : cp == atom.cp;
      case Atom::Kind::Any:
        return cp != U'\n';
      case Atom::Kind::Class:
        return classes[atom.cls].contains(cp);
    }
    return false;
  }
};

// Parses and compiles; throws ga::Error(Unsupported) for syntax outside the supported subset and
// ga::Error(InvalidArgument) for malformed patterns.
Program compile_regex(const std::string& pattern);

}  // namespace ga::text::regex_detail
