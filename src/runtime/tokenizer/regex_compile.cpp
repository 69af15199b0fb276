// Regex parser and compiler: pattern text -> syntax tree -> VM program (regex_program.h).
//
// The parser is a recursive descent over the pattern's code points (so class ranges with non-ASCII
// endpoints like [一-龥] are ordinary). It accepts the subset that pre-tokenizer patterns use, with
// Oniguruma (Ruby syntax, as Hugging Face tokenizers run it) semantics, and rejects everything else with
// ga::Error(Unsupported) naming the construct and its position, so a pattern is never silently
// misread. Syntax whose meaning differs between Oniguruma and PCRE (`\h`, `{n,m}+`, a `(?i)` in the
// middle of a group) is rejected rather than guessed. Recursion is bounded by kMaxNesting so a hostile
// pattern cannot overflow the stack either.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/regex_program.h"
#include "runtime/tokenizer/unicode.h"

namespace ga::text::regex_detail {

namespace {

constexpr int kMaxNesting = 200;
constexpr uint32_t kMaxRepeatCount = 1000;   // {n,m} bounds beyond this are refused
constexpr size_t kMaxProgramSize = 1 << 20;  // instructions, after expanding counted repeats

// ---- classes ----

bool item_matches(const ClassItem& item, char32_t cp) {
  bool in = false;
  switch (item.kind) {
    case ClassItem::Kind::Range:
      in = cp >= item.lo && cp <= item.hi;
      break;
    case ClassItem::Kind::Category:
      in = has_category(cp, item.mask);
      break;
    case ClassItem::Kind::WhiteSpace:
      in = is_white_space(cp);
      break;
    case ClassItem::Kind::Script:
      in = script_of(cp) == item.script;
      break;
  }
  return in != item.negated;
}

// ---- syntax tree ----

struct Node {
  enum class Kind { Empty, One, Concat, Alternate, Repeat, Look, Atomic, Assert };
  enum class Greed { Greedy, Lazy, Possessive };
  Kind kind = Kind::Empty;
  std::vector<Node> children;
  uint32_t atom = 0;             // One
  uint32_t min = 0, max = 0;     // Repeat
  Greed greed = Greed::Greedy;   // Repeat
  bool negative = false;         // Look
  Op assert_op = Op::LineStart;  // Assert
  bool assert_flag = false;      // Assert (\B)
};

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::One:
      return false;
    case Node::Kind::Concat:
      for (const Node& c : n.children) {
        if (!nullable(c)) return false;
      }
      return true;
    case Node::Kind::Alternate:
      for (const Node& c : n.children) {
        if (nullable(c)) return true;
      }
      return false;
    case Node::Kind::Repeat:
      return n.min == 0 || nullable(n.children[0]);
    case Node::Kind::Atomic:
      return nullable(n.children[0]);
    default:
      return true;  // Empty, Look, Assert consume nothing
  }
}

// The result of parsing a backslash escape.
struct Escape {
  enum class Kind { Literal, Items, Assert };
  Kind kind = Kind::Literal;
  char32_t cp = 0;
  std::vector<ClassItem> items;
  Op assert_op = Op::LineStart;
  bool assert_flag = false;
};

class Parser {
 public:
  Parser(const std::string& pattern, Program* prog) : pattern_(pattern), p_(utf8_to_codepoints(pattern)), prog_(prog) {}

  Node parse() {
    Node root = parse_alternation(false, 0);
    if (i_ < p_.size()) fail_invalid("unmatched ')'");
    return root;
  }

 private:
  const std::string& pattern_;
  std::u32string p_;
  Program* prog_;
  size_t i_ = 0;

  [[noreturn]] void unsupported(const std::string& construct, size_t at) const {
    GA_THROW(Unsupported, "regex: unsupported construct '", construct, "' at position ", at, " in pattern ", pattern_);
  }
  [[noreturn]] void fail_invalid(const std::string& what) const {
    GA_THROW(InvalidArgument, "regex: ", what, " at position ", i_, " in pattern ", pattern_);
  }
  std::string text(size_t from, size_t to) const {
    return codepoints_to_utf8(std::u32string_view(p_).substr(from, std::min(to, p_.size()) - from));
  }
  bool at_end() const { return i_ >= p_.size(); }
  char32_t peek(size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0; }

  uint32_t add_atom(Atom atom) {
    prog_->atoms.push_back(atom);
    return static_cast<uint32_t>(prog_->atoms.size() - 1);
  }
  uint32_t add_class(CharClass cls) {
    cls.finalize();
    prog_->classes.push_back(std::move(cls));
    return static_cast<uint32_t>(prog_->classes.size() - 1);
  }
  Node one(Atom atom) {
    Node n;
    n.kind = Node::Kind::One;
    n.atom = add_atom(atom);
    return n;
  }
  Node literal(char32_t cp, bool icase) {
    Atom a;
    a.kind = Atom::Kind::Char;
    // Only cased letters need the folded comparison; caseless ones compare exactly.
    a.ignore_case = icase && (simple_case_fold(cp) != cp || !case_fold_sources(cp).empty());
    a.cp = a.ignore_case ? simple_case_fold(cp) : cp;
    return one(a);
  }
  Node class_node(CharClass cls, bool icase) {
    cls.ignore_case = icase;
    Atom a;
    a.kind = Atom::Kind::Class;
    a.cls = add_class(std::move(cls));
    return one(a);
  }

  // alternation := sequence ('|' sequence)*, ending at ')' or the end of the pattern.
  Node parse_alternation(bool icase, int depth) {
    if (depth > kMaxNesting) unsupported("nesting deeper than 200 groups", i_);
    Node alt;
    alt.kind = Node::Kind::Alternate;
    // A leading (?i) / (?-i) applies to the whole group, which every flavour agrees on.
    while (peek() == U'(' && peek(1) == U'?' && (peek(2) == U'i' || peek(2) == U'-')) {
      size_t save = i_;
      i_ += 2;
      bool on = true;
      if (peek() == U'-') on = false, ++i_;
      if (peek() == U'i' && peek(1) == U')') {
        icase = on;
        i_ += 2;
        continue;
      }
      i_ = save;
      break;
    }
    alt.children.push_back(parse_sequence(icase, depth));
    while (peek() == U'|') {
      ++i_;
      alt.children.push_back(parse_sequence(icase, depth));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Node parse_sequence(bool icase, int depth) {
    Node seq;
    seq.kind = Node::Kind::Concat;
    while (!at_end() && peek() != U'|' && peek() != U')') {
      size_t atom_start = i_;
      Node atom = parse_atom(icase, depth);
      parse_quantifiers(&atom, atom_start);
      seq.children.push_back(std::move(atom));
    }
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    if (seq.children.empty()) return Node{};
    return seq;
  }

  // Parses "{n}", "{n,}", "{n,m}", "{,m}" at i_; returns false (i_ unchanged) when it is not an interval,
  // in which case Oniguruma and PCRE read the '{' as a literal.
  bool parse_interval(uint32_t* min, uint32_t* max) {
    size_t j = i_ + 1;
    auto number = [&](uint64_t* v) {
      size_t start = j;
      *v = 0;
      while (j < p_.size() && p_[j] >= U'0' && p_[j] <= U'9') {
        *v = *v * 10 + (p_[j] - U'0');
        if (*v > 1000000) *v = 1000000;
        ++j;
      }
      return j > start;
    };
    uint64_t lo = 0, hi = 0;
    bool has_lo = number(&lo);
    bool has_comma = j < p_.size() && p_[j] == U',';
    bool has_hi = false;
    if (has_comma) {
      ++j;
      has_hi = number(&hi);
    }
    if (j >= p_.size() || p_[j] != U'}' || (!has_lo && !has_hi)) return false;
    if (!has_lo && !has_comma) return false;
    if (lo > kMaxRepeatCount || (has_hi && hi > kMaxRepeatCount)) unsupported("repeat count above 1000", i_);
    *min = static_cast<uint32_t>(lo);
    *max = has_comma ? (has_hi ? static_cast<uint32_t>(hi) : kUnbounded) : static_cast<uint32_t>(lo);
    if (*max < *min) fail_invalid("repeat bounds out of order");
    i_ = j + 1;
    return true;
  }

  void parse_quantifiers(Node* atom, size_t atom_start) {
    bool quantified = false;
    while (!at_end()) {
      size_t q_start = i_;
      uint32_t min = 0, max = 0;
      bool interval = false;
      char32_t c = peek();
      if (c == U'?') {
        min = 0, max = 1, ++i_;
      } else if (c == U'*') {
        min = 0, max = kUnbounded, ++i_;
      } else if (c == U'+') {
        min = 1, max = kUnbounded, ++i_;
      } else if (c == U'{' && parse_interval(&min, &max)) {
        interval = true;
      } else {
        return;
      }
      if (quantified) unsupported("stacked quantifier " + text(q_start, i_), q_start);
      if (atom->kind == Node::Kind::Look || atom->kind == Node::Kind::Assert || atom->kind == Node::Kind::Empty) {
        unsupported("quantifier on an assertion " + text(atom_start, i_), q_start);
      }
      Node::Greed greed = Node::Greed::Greedy;
      if (peek() == U'?') {
        greed = Node::Greed::Lazy, ++i_;
      } else if (peek() == U'+') {
        // a{1,3}+ is possessive in PCRE but "repeat one or more times" in Oniguruma's Ruby syntax.
        if (interval) unsupported(text(q_start, i_ + 1) + " (possessive interval)", q_start);
        greed = Node::Greed::Possessive, ++i_;
      }
      if (max == kUnbounded && nullable(*atom)) {
        unsupported("unbounded repeat of an expression that can match empty: " + text(atom_start, i_), q_start);
      }
      Node rep;
      rep.kind = Node::Kind::Repeat;
      rep.min = min, rep.max = max, rep.greed = greed;
      rep.children.push_back(std::move(*atom));
      *atom = std::move(rep);
      quantified = true;
    }
  }

  Node parse_atom(bool icase, int depth) {
    const size_t start = i_;
    const char32_t c = p_[i_++];
    switch (c) {
      case U'(':
        return parse_group(icase, depth, start);
      case U'[':
        return class_node(parse_class(icase, start), icase);
      case U'.': {
        Atom a;
        a.kind = Atom::Kind::Any;
        return one(a);
      }
      case U'^':
        return assertion(Op::LineStart, false);
      case U'$':
        return assertion(Op::LineEnd, false);
      case U'*':
      case U'+':
      case U'?':
        i_ = start;
        fail_invalid("quantifier with nothing to repeat");
      case U'{': {
        uint32_t lo = 0, hi = 0;
        i_ = start;
        if (parse_interval(&lo, &hi)) {
          i_ = start;
          fail_invalid("quantifier with nothing to repeat");
        }
        i_ = start + 1;
        return literal(c, icase);  // '{' that does not start an interval is a literal
      }
      case U'\\': {
        Escape e = parse_escape(false, start);
        if (e.kind == Escape::Kind::Assert) return assertion(e.assert_op, e.assert_flag);
        if (e.kind == Escape::Kind::Literal) return literal(e.cp, icase);
        CharClass cls;
        cls.items = std::move(e.items);
        return class_node(std::move(cls), icase);
      }
      default:
        return literal(c, icase);
    }
  }

  Node assertion(Op op, bool flag) {
    Node n;
    n.kind = Node::Kind::Assert;
    n.assert_op = op;
    n.assert_flag = flag;
    return n;
  }

  Node parse_group(bool icase, int depth, size_t start) {
    Node wrapper;  // Look or Atomic, or none for plain groups
    bool wrap = false;
    if (peek() == U'?') {
      ++i_;
      char32_t k = peek();
      if (k == U':') {
        ++i_;
      } else if (k == U'=' || k == U'!') {
        ++i_;
        wrap = true;
        wrapper.kind = Node::Kind::Look;
        wrapper.negative = k == U'!';
      } else if (k == U'>') {
        ++i_;
        wrap = true;
        wrapper.kind = Node::Kind::Atomic;
      } else if (k == U'<' && (peek(1) == U'=' || peek(1) == U'!')) {
        unsupported(text(start, i_ + 2) + " (lookbehind)", start);
      } else if (k == U'<' || (k == U'P' && peek(1) == U'<')) {
        // Named group: we report no captures, so it is an ordinary group.
        size_t close = p_.find(U'>', i_);
        if (close == std::u32string::npos) fail_invalid("unterminated group name");
        i_ = close + 1;
      } else if (k == U'i' || k == U'-') {
        bool on = true;
        if (peek() == U'-') on = false, ++i_;
        if (peek() != U'i') unsupported(text(start, i_ + 1), start);
        ++i_;
        if (peek() == U')') unsupported(text(start, i_ + 1) + " (inline flag not at the start of a group)", start);
        if (peek() != U':') unsupported(text(start, i_ + 1), start);
        ++i_;
        icase = on;
      } else {
        unsupported(text(start, i_ + 1), start);
      }
    }
    Node body = parse_alternation(icase, depth + 1);
    if (peek() != U')') i_ = start, fail_invalid("unterminated group");
    ++i_;
    if (!wrap) return body;
    wrapper.children.push_back(std::move(body));
    return wrapper;
  }

  uint32_t parse_hex(size_t max_digits, size_t esc_start) {
    uint32_t v = 0;
    size_t n = 0;
    while (n < max_digits && !at_end()) {
      char32_t h = peek();
      int d = h >= U'0' && h <= U'9'   ? static_cast<int>(h - U'0')
              : h >= U'a' && h <= U'f' ? static_cast<int>(h - U'a' + 10)
              : h >= U'A' && h <= U'F' ? static_cast<int>(h - U'A' + 10)
                                       : -1;
      if (d < 0) break;
      v = v * 16 + static_cast<uint32_t>(d);
      if (v > 0x10FFFF) unsupported(text(esc_start, i_ + 1) + " (code point out of range)", esc_start);
      ++i_, ++n;
    }
    if (n == 0) fail_invalid("hexadecimal escape without digits");
    return v;
  }

  ClassItem property_item(size_t esc_start, bool negated) {
    std::u32string name;
    if (peek() == U'{') {
      size_t close = p_.find(U'}', i_);
      if (close == std::u32string::npos) fail_invalid("unterminated \\p{...}");
      name = p_.substr(i_ + 1, close - i_ - 1);
      i_ = close + 1;
    } else if (!at_end()) {
      name = p_.substr(i_++, 1);  // \pL
    }
    if (!name.empty() && name[0] == U'^') {
      negated = !negated;
      name.erase(0, 1);
    }
    const std::string utf8 = codepoints_to_utf8(name);
    ClassItem item;
    item.negated = negated;
    if (category_mask_by_name(utf8, &item.mask)) {
      item.kind = ClassItem::Kind::Category;
    } else if (int script = script_by_name(utf8); script >= 0) {
      item.kind = ClassItem::Kind::Script;
      item.script = script;
    } else if (utf8 == "White_Space" || utf8 == "Space" || utf8 == "space") {
      item.kind = ClassItem::Kind::WhiteSpace;
    } else {
      unsupported(text(esc_start, i_) + " (unknown property)", esc_start);
    }
    return item;
  }

  // Parses the escape whose backslash is at esc_start (i_ is just past it).
  Escape parse_escape(bool in_class, size_t esc_start) {
    if (at_end()) fail_invalid("trailing backslash");
    const char32_t c = p_[i_++];
    Escape e;
    auto set = [&](ClassItem item) {
      e.kind = Escape::Kind::Items;
      e.items.push_back(item);
      return e;
    };
    auto category = [&](CategoryMask mask, bool negated) {
      ClassItem item;
      item.kind = ClassItem::Kind::Category;
      item.mask = mask;
      item.negated = negated;
      return set(item);
    };
    auto lit = [&](char32_t cp) {
      e.cp = cp;
      return e;
    };
    auto anchor = [&](Op op, bool flag) {
      if (in_class) unsupported(text(esc_start, i_) + " inside a class", esc_start);
      e.kind = Escape::Kind::Assert;
      e.assert_op = op;
      e.assert_flag = flag;
      return e;
    };
    switch (c) {
      case U't':
        return lit(U'\t');
      case U'n':
        return lit(U'\n');
      case U'r':
        return lit(U'\r');
      case U'f':
        return lit(U'\f');
      case U'v':
        return lit(U'\v');
      case U'a':
        return lit(U'\a');
      case U'e':
        return lit(0x1B);
      case U'0':
        if (peek() >= U'0' && peek() <= U'7') unsupported(text(esc_start, i_ + 1) + " (octal escape)", esc_start);
        return lit(0);
      case U'x':
        if (peek() == U'{') {
          ++i_;
          char32_t v = parse_hex(8, esc_start);
          if (peek() != U'}') fail_invalid("unterminated \\x{...}");
          ++i_;
          return lit(v);
        }
        return lit(parse_hex(2, esc_start));
      case U'u':
        return lit(parse_hex(4, esc_start));
      case U's':
      case U'S': {
        ClassItem item;
        item.kind = ClassItem::Kind::WhiteSpace;
        item.negated = c == U'S';
        return set(item);
      }
      case U'd':
        return category(category_bit(GeneralCategory::Nd), false);
      case U'D':
        return category(category_bit(GeneralCategory::Nd), true);
      case U'w':
        return category(category_masks::kWord, false);
      case U'W':
        return category(category_masks::kWord, true);
      case U'p':
        return set(property_item(esc_start, false));
      case U'P':
        return set(property_item(esc_start, true));
      case U'A':
        return anchor(Op::TextStart, false);
      case U'z':
        return anchor(Op::TextEnd, false);
      case U'Z':
        return anchor(Op::TextEndNewline, false);
      case U'b':
        return anchor(Op::WordBoundary, false);
      case U'B':
        return anchor(Op::WordBoundary, true);
      default:
        break;
    }
    const bool ascii_alnum = (c >= U'0' && c <= U'9') || (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z');
    if (ascii_alnum) unsupported(text(esc_start, i_), esc_start);
    return lit(c);  // an escaped symbol or non-ASCII character stands for itself
  }

  CharClass parse_class(bool icase, size_t start) {
    CharClass cls;
    cls.ignore_case = icase;
    if (peek() == U'^') cls.negated = true, ++i_;
    bool first = true;
    while (true) {
      if (at_end()) i_ = start, fail_invalid("unterminated character class");
      const size_t elem_start = i_;
      char32_t c = p_[i_++];
      if (c == U']' && !first) break;
      first = false;
      if (c == U'[') unsupported(text(elem_start, elem_start + 2) + " (nested class or POSIX bracket)", elem_start);
      if (c == U'&' && peek() == U'&') unsupported("&& (class intersection)", elem_start);
      char32_t lo = c;
      if (c == U'\\') {
        Escape e = parse_escape(true, elem_start);
        if (e.kind == Escape::Kind::Items) {
          if (peek() == U'-' && peek(1) != U']')
            unsupported(text(elem_start, i_ + 2) + " (range from a class)", elem_start);
          cls.items.insert(cls.items.end(), e.items.begin(), e.items.end());
          continue;
        }
        lo = e.cp;
      }
      char32_t hi = lo;
      if (peek() == U'-' && i_ + 1 < p_.size() && peek(1) != U']') {
        ++i_;
        const size_t hi_start = i_;
        hi = p_[i_++];
        if (hi == U'[') unsupported(text(hi_start, hi_start + 2) + " (nested class)", hi_start);
        if (hi == U'\\') {
          Escape e = parse_escape(true, hi_start);
          if (e.kind != Escape::Kind::Literal) unsupported(text(elem_start, i_) + " (range to a class)", elem_start);
          hi = e.cp;
        }
        if (hi < lo) i_ = elem_start, fail_invalid("class range out of order");
      }
      ClassItem item;
      item.kind = ClassItem::Kind::Range;
      item.lo = lo;
      item.hi = hi;
      cls.items.push_back(item);
    }
    return cls;
  }
};

// ---- code generation ----

class Compiler {
 public:
  explicit Compiler(Program* prog) : prog_(prog) {}

  void emit_program(const Node& root) {
    emit(root);
    push(Op::Match);
  }

 private:
  Program* prog_;

  uint32_t pc() const { return static_cast<uint32_t>(prog_->insts.size()); }
  uint32_t push(Op op) {
    if (prog_->insts.size() >= kMaxProgramSize) {
      GA_THROW(Unsupported, "regex: pattern too large after expanding repeats: ", prog_->pattern);
    }
    Inst inst;
    inst.op = op;
    prog_->insts.push_back(inst);
    return pc() - 1;
  }

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Empty:
        return;
      case Node::Kind::One:
        prog_->insts[push(Op::One)].x = n.atom;
        return;
      case Node::Kind::Concat:
        for (const Node& c : n.children) emit(c);
        return;
      case Node::Kind::Alternate:
        return emit_alternate(n);
      case Node::Kind::Repeat:
        return emit_repeat(n);
      case Node::Kind::Look:
      case Node::Kind::Atomic: {
        // [Look/Atomic y=after] [sub-program ...] [Match] after:
        uint32_t head = push(n.kind == Node::Kind::Look ? Op::Look : Op::Atomic);
        prog_->insts[head].flag = n.negative;
        emit(n.children[0]);
        push(Op::Match);
        prog_->insts[head].y = pc();
        return;
      }
      case Node::Kind::Assert: {
        uint32_t at = push(n.assert_op);
        prog_->insts[at].flag = n.assert_flag;
        return;
      }
    }
  }

  // a|b|c:  Split(L1, N1)  L1: a  Jmp end  N1: Split(L2, N2) L2: b  Jmp end  N2: c  end:
  void emit_alternate(const Node& n) {
    std::vector<uint32_t> jumps_to_end;
    for (size_t k = 0; k < n.children.size(); ++k) {
      const bool last = k + 1 == n.children.size();
      uint32_t split = 0;
      if (!last) {
        split = push(Op::Split);
        prog_->insts[split].x = pc();
      }
      emit(n.children[k]);
      if (!last) {
        jumps_to_end.push_back(push(Op::Jmp));
        prog_->insts[split].y = pc();
      }
    }
    for (uint32_t j : jumps_to_end) prog_->insts[j].x = pc();
  }

  void emit_repeat(const Node& n) {
    const Node& body = n.children[0];
    if (body.kind == Node::Kind::One && n.greed != Node::Greed::Lazy) {
      uint32_t at = push(Op::Repeat);
      Inst& inst = prog_->insts[at];
      inst.x = body.atom;
      inst.min = n.min;
      inst.max = n.max;
      inst.flag = n.greed == Node::Greed::Possessive;
      if (n.max == kUnbounded) inst.memo = prog_->memo_slots++;  // see the failed-entry memo in regex_match.cpp
      return;
    }
    if (n.greed == Node::Greed::Possessive) {  // x*+ == (?>x*)
      Node greedy = n;
      greedy.greed = Node::Greed::Greedy;
      Node atomic;
      atomic.kind = Node::Kind::Atomic;
      atomic.children.push_back(std::move(greedy));
      emit(atomic);
      return;
    }
    const bool lazy = n.greed == Node::Greed::Lazy;
    for (uint32_t k = 0; k < n.min; ++k) emit(body);
    if (n.max == kUnbounded) {
      // loop: Split(body, exit)  body  Jmp loop  exit:   (lazy: Split(exit, body))
      uint32_t loop = push(Op::Split);
      prog_->insts[loop].flag = true;  // a loop head: the VM memoizes its failed entries
      emit(body);
      prog_->insts[push(Op::Jmp)].x = loop;
      set_split(loop, loop + 1, pc(), lazy);
      return;
    }
    // x{0,k}: nested optionals, each one skipping to the common exit.
    std::vector<uint32_t> splits;
    for (uint32_t k = n.min; k < n.max; ++k) {
      splits.push_back(push(Op::Split));
      prog_->insts[splits.back()].flag = true;  // nested counted repeats can blow up like loops
      emit(body);
    }
    for (uint32_t s : splits) set_split(s, s + 1, pc(), lazy);
  }

  void set_split(uint32_t at, uint32_t enter, uint32_t skip, bool lazy) {
    prog_->insts[at].x = lazy ? skip : enter;
    prog_->insts[at].y = lazy ? enter : skip;
  }
};

}  // namespace

bool CharClass::items_match(char32_t cp) const {
  for (const ClassItem& item : items) {
    if (item_matches(item, cp)) return true;
  }
  return false;
}

bool CharClass::contains_slow(char32_t cp) const {
  bool in = items_match(cp);
  if (!in && ignore_case) {
    // Case-insensitive: cp matches when any code point of its case-fold orbit is a member.
    const char32_t folded = simple_case_fold(cp);
    in = (folded != cp && items_match(folded));
    if (!in) {
      for (char32_t other : case_fold_sources(folded)) {
        if (other != cp && items_match(other)) {
          in = true;
          break;
        }
      }
    }
  }
  return in != negated;
}

void CharClass::finalize() {
  ascii = {};
  for (char32_t cp = 0; cp < 128; ++cp) {
    if (contains_slow(cp)) ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
  }
}

Program compile_regex(const std::string& pattern) {
  Program prog;
  prog.pattern = pattern;
  Parser parser(prog.pattern, &prog);
  Node root = parser.parse();
  Compiler(&prog).emit_program(root);
  return prog;
}

}  // namespace ga::text::regex_detail
