// The backtracking VM that runs a compiled regex program (regex_program.h), and the Regex class.
//
// Semantics are Perl/Oniguruma leftmost-first: at each start position the VM explores alternatives in
// pattern order and takes the first path that reaches Match. Backtrack points live on an explicit stack
// (std::vector on the heap), so input length never turns into C++ recursion; a nested run of the same
// loop is started only for lookahead and atomic groups, whose depth the pattern bounds.
//
// Single-code-point loops (Op::Repeat) count their run in one go and backtrack by popping a counter
// entry, so `\s+` over a megabyte costs one stack entry, not one per code point. Under each such loop
// entry the VM also pushes a "loop failed" sentinel: reaching it while unwinding proves that entering
// the loop at that position cannot lead to a match. Since every entry position inside the same run has
// a subset of those continuations (same run end, later start), the VM remembers the failed interval per
// loop and rejects later entries inside it in O(1). That keeps patterns like `\s+$` or `\s*[\r\n]+`
// linear on long whitespace runs where a plain backtracker is quadratic. Branch points of other repeats
// (`(?:ab|a)*`, `x{2,5}` of a group) get the same treatment through a set of failed (pc, pos) states, which
// bounds the work of nested repeats by program size x input length instead of exponential. The memo is
// sound because a state (pc, pos) has no other inputs: no captures, backreferences or lookbehind exist
// in this engine, and a state is recorded only once every path from it has failed.
#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/regex_program.h"
#include "runtime/tokenizer/unicode.h"

namespace ga::text {

namespace {

using regex_detail::Atom;
using regex_detail::Inst;
using regex_detail::kUnbounded;
using regex_detail::Op;
using regex_detail::Program;

struct Backtrack {
  enum class Kind : uint8_t { Resume, RetryShorter, LoopFailed, SplitFailed };
  size_t pos;   // Resume: where to resume; others: where the loop or split was entered
  size_t aux;   // RetryShorter: the count to try; LoopFailed: the end of the loop's run
  uint32_t pc;  // Resume: where to resume; others: the Repeat or Split instruction
  Kind kind;
};

class Vm {
 public:
  Vm(const Program& prog, std::u32string_view text)
      : prog_(prog), text_(text), failed_entry_(prog.memo_slots, FailedInterval{1, 0}) {}

  // Runs the (sub-)program starting at pc from pos; on success stores the match end. Leaves the
  // backtrack stack as it found it either way.
  bool run(uint32_t pc, size_t pos, size_t* end) {
    const size_t base = stack_.size();
    const size_t n = text_.size();
    while (true) {
      const Inst& inst = prog_.insts[pc];
      bool ok = true;
      switch (inst.op) {
        case Op::One:
          ok = pos < n && prog_.atom_matches(prog_.atoms[inst.x], text_[pos]);
          if (ok) ++pos, ++pc;
          break;
        case Op::Split:
          if (inst.flag) {
            if (failed_splits_.count(split_key(pc, pos)) != 0) {
              ok = false;
              break;
            }
            stack_.push_back({pos, 0, pc, Backtrack::Kind::SplitFailed});
          }
          stack_.push_back({pos, 0, inst.y, Backtrack::Kind::Resume});
          pc = inst.x;
          break;
        case Op::Jmp:
          pc = inst.x;
          break;
        case Op::Repeat:
          ok = enter_repeat(inst, &pc, &pos);
          break;
        case Op::Look: {
          size_t ignored = 0;
          ok = run(pc + 1, pos, &ignored) != inst.flag;
          if (ok) pc = inst.y;
          break;
        }
        case Op::Atomic: {
          size_t sub_end = 0;
          ok = run(pc + 1, pos, &sub_end);
          if (ok) pos = sub_end, pc = inst.y;
          break;
        }
        case Op::LineStart:
          ok = pos == 0 || text_[pos - 1] == U'\n';
          ++pc;
          break;
        case Op::LineEnd:
          ok = pos == n || text_[pos] == U'\n';
          ++pc;
          break;
        case Op::TextStart:
          ok = pos == 0;
          ++pc;
          break;
        case Op::TextEnd:
          ok = pos == n;
          ++pc;
          break;
        case Op::TextEndNewline:
          ok = pos == n || (pos + 1 == n && text_[pos] == U'\n');
          ++pc;
          break;
        case Op::WordBoundary: {
          const bool before = pos > 0 && is_word(text_[pos - 1]);
          const bool after = pos < n && is_word(text_[pos]);
          ok = (before != after) != inst.flag;
          ++pc;
          break;
        }
        case Op::Match:
          *end = pos;
          stack_.resize(base);
          return true;
      }
      if (ok) continue;
      if (!backtrack(base, &pc, &pos)) return false;
    }
  }

 private:
  struct FailedInterval {
    size_t first_entry, run_end;  // entries in [first_entry, run_end] are known to fail; empty when first > end
  };

  const Program& prog_;
  std::u32string_view text_;
  std::vector<Backtrack> stack_;
  std::vector<FailedInterval> failed_entry_;    // per memo slot (Repeat with unbounded max)
  std::unordered_set<uint64_t> failed_splits_;  // split_key of repeat branch points proven to fail

  // Instruction indices stay below 2^20 (kMaxProgramSize), so (pos, pc) packs into one key.
  static uint64_t split_key(uint32_t pc, size_t pos) { return (static_cast<uint64_t>(pos) << 20) | pc; }

  static bool is_word(char32_t cp) { return has_category(cp, category_masks::kWord); }

  size_t count_run(const Atom& atom, size_t pos, uint32_t max) const {
    const size_t limit = max == kUnbounded ? text_.size() : std::min(text_.size(), pos + max);
    size_t k = pos;
    if (atom.kind == Atom::Kind::Class) {
      const regex_detail::CharClass& cls = prog_.classes[atom.cls];
      while (k < limit && cls.contains(text_[k])) ++k;
    } else {
      while (k < limit && prog_.atom_matches(atom, text_[k])) ++k;
    }
    return k - pos;
  }

  bool enter_repeat(const Inst& inst, uint32_t* pc, size_t* pos) {
    const Atom& atom = prog_.atoms[inst.x];
    const uint32_t repeat_pc = *pc;
    const size_t entry = *pos;
    if (inst.max != kUnbounded) {  // bounded: no memo, the work per entry is bounded by max
      const size_t count = count_run(atom, entry, inst.max);
      if (count < inst.min) return false;
      if (!inst.flag && count > inst.min)
        stack_.push_back({entry, count - 1, repeat_pc, Backtrack::Kind::RetryShorter});
      *pos = entry + count;
      *pc = repeat_pc + 1;
      return true;
    }
    FailedInterval& failed = failed_entry_[inst.memo];
    if (entry >= failed.first_entry && entry <= failed.run_end) return false;
    size_t count = 0;
    size_t useful = std::numeric_limits<size_t>::max();  // largest count whose continuation is not known to fail
    if (entry < failed.first_entry && failed.first_entry <= failed.run_end) {
      // If our run reaches first_entry it ends at run_end, and every continuation at or beyond
      // first_entry + min was already tried from first_entry: scan only up to there and try only the
      // counts that land before it. Entering at first_entry - 1, - 2, ... (as `(?:a+)+b` does) is O(1).
      size_t k = entry;
      while (k < failed.first_entry && prog_.atom_matches(atom, text_[k])) ++k;
      if (k == failed.first_entry) {
        count = failed.run_end - entry;
        useful = failed.first_entry + inst.min - 1 - entry;
      } else {
        count = k - entry;
      }
    } else {
      count = count_run(atom, entry, inst.max);
    }
    if (count < inst.min) return false;
    const size_t run_end = entry + count;
    const size_t first_try = inst.flag ? count : std::min(count, useful);  // possessive: all or nothing
    if (first_try > useful) {      // possessive whose only continuation is known to fail
      failed.first_entry = entry;  // same run end: the interval grows to [entry, run_end]
      return false;
    }
    stack_.push_back({entry, run_end, repeat_pc, Backtrack::Kind::LoopFailed});
    if (!inst.flag && first_try > inst.min) {
      stack_.push_back({entry, first_try - 1, repeat_pc, Backtrack::Kind::RetryShorter});
    }
    *pos = entry + first_try;
    *pc = repeat_pc + 1;
    return true;
  }

  // Pops backtrack entries above base until one gives a new state; false when they are exhausted.
  bool backtrack(size_t base, uint32_t* pc, size_t* pos) {
    while (stack_.size() > base) {
      const Backtrack top = stack_.back();
      stack_.pop_back();
      switch (top.kind) {
        case Backtrack::Kind::Resume:
          *pc = top.pc;
          *pos = top.pos;
          return true;
        case Backtrack::Kind::RetryShorter: {
          const Inst& inst = prog_.insts[top.pc];
          if (top.aux > inst.min) stack_.push_back({top.pos, top.aux - 1, top.pc, Backtrack::Kind::RetryShorter});
          *pc = top.pc + 1;
          *pos = top.pos + top.aux;
          return true;
        }
        case Backtrack::Kind::SplitFailed:
          failed_splits_.insert(split_key(top.pc, top.pos));
          break;
        case Backtrack::Kind::LoopFailed: {
          FailedInterval& failed = failed_entry_[prog_.insts[top.pc].memo];
          const bool extends = failed.run_end == top.aux && failed.first_entry <= failed.run_end;
          failed.first_entry = extends ? std::min(failed.first_entry, top.pos) : top.pos;
          failed.run_end = top.aux;
          break;
        }
      }
    }
    return false;
  }
};

}  // namespace

struct Regex::Impl {
  Program program;
};

Regex::Regex(std::string_view pattern) : impl_(std::make_unique<Impl>()) {
  impl_->program = regex_detail::compile_regex(std::string(pattern));
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

const std::string& Regex::pattern() const {
  static const std::string moved_from;
  return impl_ != nullptr ? impl_->program.pattern : moved_from;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::u32string_view text) const {
  GA_CHECK(impl_ != nullptr, InvalidArgument, "regex: find_all on a moved-from Regex");
  std::vector<std::pair<size_t, size_t>> matches;
  Vm vm(impl_->program, text);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t start = pos;
    size_t end = 0;
    bool found = false;
    for (; start <= text.size(); ++start) {
      if (vm.run(0, start, &end)) {
        found = true;
        break;
      }
    }
    if (!found) break;
    matches.emplace_back(start, end);
    pos = end > start ? end : start + 1;  // an empty match still moves the search forward
  }
  return matches;
}

}  // namespace ga::text
