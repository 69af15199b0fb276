// Tests of the pre-tokenizer regex engine (regex.h).
//
// Expected splits are worked out by hand from Oniguruma/PCRE leftmost-first semantics (each one has a
// comment walking through the non-obvious step), on the exact pre-tokenizer patterns of the model
// families we support. Long-input tests check that matching stays linear and never recurses per code
// point (100 KB whitespace runs, 1 MB of text), with a wall-clock bound generous enough for a loaded CI
// machine but far below what a quadratic backtracker needs.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/regex.h"

namespace ga::text {
namespace {

const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The deepseek-llm letter class. Six of its code points have singleton canonical decompositions
// (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126 OHM, U+212A KELVIN); a copy of the pattern that went through NFC
// normalization turns e.g. "U+1FD0-U+1FD3" into an out-of-order range, so they are written as escapes.
const char* kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-"
    "ὗὙὛὝὟ-\u1F7Dᾀ-"
    "ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-"
    "ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-"
    "𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

// The matched pieces of text, as UTF-8.
std::vector<std::string> split(const std::string& pattern, const std::string& text) {
  const Regex re(pattern);
  const std::u32string cps = utf8_to_codepoints(text);
  std::vector<std::string> pieces;
  for (const auto& [b, e] : re.find_all(cps))
    pieces.push_back(codepoints_to_utf8(std::u32string_view(cps).substr(b, e - b)));
  return pieces;
}

using Pieces = std::vector<std::string>;

TEST(RegexBasics, LiteralsClassesAndAlternation) {
  EXPECT_EQ(split("ab|a", "abaab"), (Pieces{"ab", "a", "ab"}));  // leftmost-first, not longest
  EXPECT_EQ(split("a|ab", "ab"), (Pieces{"a"}));
  EXPECT_EQ(split("[a-c]+", "xxabcabdx"), (Pieces{"abcab"}));
  EXPECT_EQ(split("[^a-c]+", "xxabcabdx"), (Pieces{"xx", "dx"}));
  EXPECT_EQ(split("[]a]+", "]a]b"), (Pieces{"]a]"}));  // ']' first in a class is a literal
  EXPECT_EQ(split("[a-]+", "a-b"), (Pieces{"a-"}));
  EXPECT_EQ(split("a.c", "abc a\nc"), (Pieces{"abc"}));  // '.' does not match a newline
  EXPECT_EQ(split("\\x41\\x{1F600}\\u00e9", "A😀é"), (Pieces{"A😀é"}));
  EXPECT_EQ(split("a{2}|x{,2}y", "aaaxxxy"), (Pieces{"aa", "xxy"}));
  EXPECT_EQ(split("a{", "a{"), (Pieces{"a{"}));  // '{' not starting an interval is a literal
  EXPECT_EQ(split("\\$\\+\\.", "$+.$+"), (Pieces{"$+."}));
}

TEST(RegexBasics, EscapeClasses) {
  EXPECT_EQ(split("\\d+", "a12٣4b"), (Pieces{"12٣4"}));  // U+0663 ARABIC-INDIC DIGIT THREE is Nd
  EXPECT_EQ(split("\\d+", "Ⅻ½"), (Pieces{}));            // Nl, No are not \d
  EXPECT_EQ(split("\\w+", "héllo_wörld1, x"), (Pieces{"héllo_wörld1", "x"}));
  EXPECT_EQ(split("\\W+", "a, b"), (Pieces{", "}));
  EXPECT_EQ(split("\\s+", "a \t\u00a0\u3000b\u200bc"), (Pieces{" \t\u00a0\u3000"}));  // U+200B is not White_Space
  EXPECT_EQ(split("\\S+", "a \u2028b"), (Pieces{"a", "b"}));
  EXPECT_EQ(split("\\D+", "ab12cd"), (Pieces{"ab", "cd"}));
}

TEST(RegexBasics, UnicodeProperties) {
  EXPECT_EQ(split("\\p{L}+", "Ünïcödé 中文 ありがとう 123"), (Pieces{"Ünïcödé", "中文", "ありがとう"}));
  EXPECT_EQ(split("\\pL+", "ab1c"), (Pieces{"ab", "c"}));
  EXPECT_EQ(split("\\p{Lu}+", "HeLLo"), (Pieces{"H", "LL"}));
  EXPECT_EQ(split("\\p{N}+", "x1²Ⅻ٣y"), (Pieces{"1²Ⅻ٣"}));
  EXPECT_EQ(split("\\p{P}+", "a,.!?b«»c+"), (Pieces{",.!?", "«»"}));
  EXPECT_EQ(split("\\p{S}+", "a+$^`©😀b"), (Pieces{"+$^`©😀"}));
  EXPECT_EQ(split("\\p{M}+", "e\u0301\u0302x"), (Pieces{"\u0301\u0302"}));
  EXPECT_EQ(split("\\P{L}+", "ab12cd"), (Pieces{"12"}));
  EXPECT_EQ(split("\\p{^L}+", "ab12cd"), (Pieces{"12"}));
  EXPECT_EQ(split("[\\P{L}x]+", "abx12cd"), (Pieces{"x12"}));
  EXPECT_EQ(split("\\p{Han}+", "漢字かなカナ한글"), (Pieces{"漢字"}));
  EXPECT_EQ(split("\\p{Hiragana}+|\\p{Katakana}+|\\p{Hangul}+", "漢字かなカナ한글"), (Pieces{"かな", "カナ", "한글"}));
  EXPECT_EQ(split("[^\\r\\n\\p{L}\\p{N}]+", "a, b\r\n-1"), (Pieces{", ", "-"}));
  // Ranges with non-ASCII endpoints, as in the deepseek patterns.
  EXPECT_EQ(split("[一-龥ࠀ-一가-퟿]+", "abc中文한국어123ࠀ"), (Pieces{"中文한국어", "ࠀ"}));
}

TEST(RegexBasics, QuantifierFlavours) {
  EXPECT_EQ(split("a+?", "aaa"), (Pieces{"a", "a", "a"}));
  EXPECT_EQ(split("<.+?>", "<a><b>"), (Pieces{"<a>", "<b>"}));
  EXPECT_EQ(split("<.+>", "<a><b>"), (Pieces{"<a><b>"}));
  EXPECT_EQ(split("\\d{1,3}", "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(split("\\d{2,3}?", "12345"), (Pieces{"12", "34"}));
  EXPECT_EQ(split("\\d{2,}", "1 23 4567"), (Pieces{"23", "4567"}));
  EXPECT_EQ(split("(?:ab)+", "ababxab"), (Pieces{"abab", "ab"}));
  EXPECT_EQ(split("(?:ab){2}", "abababab"), (Pieces{"abab", "abab"}));
  EXPECT_EQ(split("(?:a|b)*?c", "abcbbc"), (Pieces{"abc", "bbc"}));
  // Possessive and atomic forms give back nothing, so these cannot match.
  EXPECT_EQ(split("a*+a", "aaa"), (Pieces{}));
  EXPECT_EQ(split("a++a", "aaa"), (Pieces{}));
  EXPECT_EQ(split("a?+a", "a"), (Pieces{}));
  EXPECT_EQ(split("(?>a+)a", "aaa"), (Pieces{}));
  EXPECT_EQ(split("(?:ab)++b", "ababb"), (Pieces{"ababb"}));
  EXPECT_EQ(split("(?:ab|a)++b", "abab"), (Pieces{}));       // atomic: the last "ab" is kept, no 'b' follows
  EXPECT_EQ(split("(?:ab|a)+b", "abab"), (Pieces{"abab"}));  // backtracks into the last iteration: "ab"+"a"+"b"
}

TEST(RegexBasics, CaseInsensitiveGroups) {
  EXPECT_EQ(split("(?i:'s|'t)", "'S 'T 's x"), (Pieces{"'S", "'T", "'s"}));
  EXPECT_EQ(split("(?i)abc", "ABC aBc abd"), (Pieces{"ABC", "aBc"}));
  EXPECT_EQ(split("(?i:[a-c]+)", "xABCabcx"), (Pieces{"ABCabc"}));
  EXPECT_EQ(split("(?i:[^a-c]+)", "xABCabcx"), (Pieces{"x", "x"}));
  EXPECT_EQ(split("(?i:k)", "kK\u212A"), (Pieces{"k", "K", "\u212A"}));  // KELVIN SIGN folds to k
  EXPECT_EQ(split("(?i:σ)+", "ΣσςX"), (Pieces{"Σσς"}));
  EXPECT_EQ(split("(?i:ab)c", "ABc ABC"), (Pieces{"ABc"}));  // the flag ends with its group
  EXPECT_EQ(split("(?i:a(?-i:b))", "Ab AB"), (Pieces{"Ab"}));
}

TEST(RegexBasics, LookaheadAndAnchors) {
  EXPECT_EQ(split("a(?=b)", "acab"), (Pieces{"a"}));
  EXPECT_EQ(split("a(?!b)", "abac"), (Pieces{"a"}));
  EXPECT_EQ(split("^\\w+", "ab cd\nef"), (Pieces{"ab", "ef"}));  // Oniguruma: ^ is a line anchor
  EXPECT_EQ(split("\\w+$", "ab cd\nef"), (Pieces{"cd", "ef"}));
  EXPECT_EQ(split("\\A\\w+", "ab cd\nef"), (Pieces{"ab"}));
  EXPECT_EQ(split("\\w+\\z", "ab cd\nef"), (Pieces{"ef"}));
  EXPECT_EQ(split("\\w+\\Z", "ab\n"), (Pieces{"ab"}));
  EXPECT_EQ(split("\\bx\\w*", "xa ax x"), (Pieces{"xa", "x"}));
  EXPECT_EQ(split("\\Bx", "xa ax x"), (Pieces{"x"}));
  // \s+$ (deepseek-llm): with line anchors "  " before '\n' matches, " " before 'b' does not.
  const std::u32string text = utf8_to_codepoints("a  \n b  ");
  EXPECT_EQ(Regex("\\s+$").find_all(text), (std::vector<std::pair<size_t, size_t>>{{1, 3}, {6, 8}}));
}

TEST(RegexBasics, MoveKeepsTheProgram) {
  Regex a("\\p{L}+");
  Regex b(std::move(a));
  EXPECT_EQ(b.pattern(), "\\p{L}+");
  EXPECT_EQ(b.find_all(U"ab cd"), (std::vector<std::pair<size_t, size_t>>{{0, 2}, {3, 5}}));
  Regex c("x");
  c = std::move(b);
  EXPECT_EQ(c.find_all(U"x 1yz"), (std::vector<std::pair<size_t, size_t>>{{0, 1}, {3, 5}}));
  EXPECT_THROW(b.find_all(U"ab"), Error);  // NOLINT(bugprone-use-after-move): moved-from must fail cleanly
}

TEST(RegexBasics, EmptyMatchesAdvance) {
  const std::u32string text = U"ab";
  EXPECT_EQ(Regex("x*").find_all(text), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(Regex("a*").find_all(text), (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 1}, {2, 2}}));
  EXPECT_TRUE(Regex("a").find_all(U"").empty());
}

TEST(RegexPretokenizers, Gpt2) {
  // At the two spaces, \s+ first takes both, (?!\S) fails before '1', so it gives one back: " " + " 123".
  EXPECT_EQ(split(kGpt2, "Hello world  123 !!"), (Pieces{"Hello", " world", " ", " 123", " !!"}));
  // Contractions are case-sensitive in GPT-2: "'M" is punctuation + letters.
  EXPECT_EQ(split(kGpt2, "I'M don't we'll"), (Pieces{"I", "'", "M", " don", "'t", " we", "'ll"}));
  // Trailing spaces: \s+(?!\S) matches at the end; a newline before text falls back to \s+.
  EXPECT_EQ(split(kGpt2, "a \n\nb   "), (Pieces{"a", " \n", "\n", "b", "   "}));
  // The optional prefix of " ?\p{L}+" is a space only, so a tab before a word stands alone.
  EXPECT_EQ(split(kGpt2, "x\t\ty"), (Pieces{"x", "\t", "\t", "y"}));
  EXPECT_EQ(split(kGpt2, "  x"), (Pieces{" ", " x"}));
  EXPECT_EQ(split(kGpt2, "3.14"), (Pieces{"3", ".", "14"}));
  EXPECT_EQ(split(kGpt2, "中文 текст"), (Pieces{"中文", " текст"}));
}

TEST(RegexPretokenizers, Llama3) {
  // " " alone, then " " again (\s+(?!\S) fails before '1', and the space cannot join the digits), "123".
  EXPECT_EQ(split(kLlama3, "Hello world  123 !!"), (Pieces{"Hello", " world", " ", " ", "123", " !!"}));
  EXPECT_EQ(split(kLlama3, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split(kLlama3, "I'M HERE, don't"), (Pieces{"I", "'M", " HERE", ",", " don", "'t"}));
  // \s*[\r\n]+ : \s* first takes "\n\n  ", then gives back until [\r\n]+ can match the second '\n'.
  EXPECT_EQ(split(kLlama3, "a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(kLlama3, "x.\n\ny"), (Pieces{"x", ".\n\n", "y"}));
  EXPECT_EQ(split(kLlama3, "$hello"), (Pieces{"$hello"}));  // [^\r\n\p{L}\p{N}]? takes the '$'
  EXPECT_EQ(split(kLlama3, "   "), (Pieces{"   "}));
}

TEST(RegexPretokenizers, Qwen2) {
  EXPECT_EQ(split(kQwen2, "1234 ab"), (Pieces{"1", "2", "3", "4", " ab"}));
  EXPECT_EQ(split(kQwen2, "you're"), (Pieces{"you", "'re"}));
  EXPECT_EQ(split(kQwen2, "YOU'RE"), (Pieces{"YOU", "'RE"}));
}

TEST(RegexPretokenizers, Gpt4oStyle) {
  EXPECT_EQ(split(kGpt4o, "HelloWorld don't"), (Pieces{"Hello", "World", " don't"}));
  // "CASE": the first branch needs a lowercase letter; the second takes the capitals.
  EXPECT_EQ(split(kGpt4o, "CamelCASE 12345"), (Pieces{"Camel", "CASE", " ", "123", "45"}));
  EXPECT_EQ(split(kGpt4o, "a/b//\n"), (Pieces{"a", "/b", "//\n"}));
}

TEST(RegexPretokenizers, DeepseekSequences) {
  EXPECT_EQ(split("[\\r\\n]", "a\r\nb"), (Pieces{"\r", "\n"}));
  EXPECT_EQ(split(kDeepseekLlmLetters, "  Héllo wörld Ωmega 中"), (Pieces{" Héllo", " wörld", " Ωmega"}));
  EXPECT_EQ(split(kDeepseekLlmLetters, "ｆｕｌｌ"), (Pieces{"ｆｕｌｌ"}));
  EXPECT_EQ(split(kDeepseekLlmLetters, "\u212A\u2126\u03A9 \u1FBE\u2127"), (Pieces{"\u212A\u2126\u03A9", " \u1FBE"}));
  EXPECT_THROW(Regex("[\u1FD0-\u0390]"), Error);  // the NFC-damaged form of "U+1FD0-U+1FD3"
  // ":-~" spans the ASCII letters too; 「」 (U+300C/D) lie outside "　-。" (U+3000..U+3002).
  EXPECT_EQ(split("\\s?[!-/:-~！-／：-～‘-‟　-。]+", "a, b!?「x」！。"), (Pieces{"a,", " b!?", "x", "！。"}));
  EXPECT_EQ(split("\\s?\\p{L}+", "  hello world"), (Pieces{" hello", " world"}));
  EXPECT_EQ(split("\\s?\\p{P}+", "a ,. b"), (Pieces{" ,."}));
  EXPECT_EQ(split("\\p{N}", "a12"), (Pieces{"1", "2"}));
}

TEST(RegexPretokenizers, FalconAndStarcoder) {
  EXPECT_EQ(split("[\\p{P}\\$\\+<=>\\^~\\|`]+", "a+b=<c>|`d, e"), (Pieces{"+", "=<", ">|`", ","}));
  EXPECT_EQ(split("[0-9][0-9][0-9]", "12345678"), (Pieces{"123", "456"}));
}

// ---- errors ----

void expect_unsupported(const std::string& pattern, const std::string& construct, size_t position) {
  try {
    Regex re(pattern);
    ADD_FAILURE() << "pattern " << pattern << " compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    const std::string expected = "unsupported construct '" + construct + "' at position " + std::to_string(position);
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message() << "\nexpected: " << expected;
    EXPECT_NE(e.message().find(pattern), std::string::npos) << e.message();
  }
}

TEST(RegexErrors, UnsupportedSyntaxIsNamed) {
  expect_unsupported("a(?<=b)c", "(?<= (lookbehind)", 1);
  expect_unsupported("(a)\\1", "\\1", 3);
  expect_unsupported("[[:alpha:]]", "[: (nested class or POSIX bracket)", 1);
  expect_unsupported("x[a&&b]", "&& (class intersection)", 3);
  expect_unsupported("a{1,3}+", "{1,3}+ (possessive interval)", 1);
  expect_unsupported("a(?i)b", "(?i) (inline flag not at the start of a group)", 1);
  expect_unsupported("\\h", "\\h", 0);
  expect_unsupported("(?x)a", "(?x", 0);
  expect_unsupported("\\p{Foo}", "\\p{Foo} (unknown property)", 0);
  expect_unsupported("(?:a?)*", "unbounded repeat of an expression that can match empty: (?:a?)*", 6);
  expect_unsupported("a**", "stacked quantifier *", 2);
}

TEST(RegexErrors, MalformedPatternsAreInvalidArguments) {
  for (const char* bad : {"(abc", "abc)", "[abc", "*a", "a|+", "a{3,1}", "[z-a]", "\\", "\\x{110000}"}) {
    try {
      Regex re(bad);
      ADD_FAILURE() << "pattern " << bad << " compiled";
    } catch (const Error& e) {
      if (std::string(bad) == "\\x{110000}") {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
      } else {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad << ": " << e.what();
      }
    }
  }
}

// ---- long inputs ----

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RegexLongInputs, HundredKilobyteWhitespaceRun) {
  const size_t run = 100000;
  const auto t0 = std::chrono::steady_clock::now();
  // \s+(?!\S) takes the whole run, fails before 'b', and backtracks one step: no recursion per code point.
  const std::u32string text = U"a" + std::u32string(run, U' ') + U"b";
  EXPECT_EQ(Regex(kGpt2).find_all(text), (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, run}, {run, run + 2}}));
  EXPECT_EQ(Regex(kLlama3).find_all(text), (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, run}, {run, run + 2}}));
  // Patterns a plain backtracker runs in quadratic time on such a run (every start position scans it).
  EXPECT_TRUE(Regex("\\s+$").find_all(text).empty());
  EXPECT_TRUE(Regex("\\s*[\\r\\n]+").find_all(text).empty());
  const std::u32string trailing = U"x" + std::u32string(run, U'\t');
  EXPECT_EQ(Regex("\\s+$").find_all(trailing), (std::vector<std::pair<size_t, size_t>>{{1, run + 1}}));
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(RegexLongInputs, NestedRepeatsStayPolynomial) {
  // Classic exponential cases for a backtracker: every way of splitting the run into iterations is
  // tried before failing. The failure memo makes each (instruction, position) fail once.
  const auto t0 = std::chrono::steady_clock::now();
  const std::u32string as(5000, U'a');
  EXPECT_TRUE(Regex("(?:a|a)*b").find_all(as).empty());
  EXPECT_TRUE(Regex("(?:aa|a)*c").find_all(as).empty());
  EXPECT_TRUE(Regex("(?:a+)+b").find_all(as).empty());
  EXPECT_TRUE(Regex("(?:a|aa){2,30}b").find_all(std::u32string(200, U'a')).empty());
  EXPECT_EQ(Regex("(?:a|b|ab)*c").find_all(std::u32string(3000, U'b') + U"c"),
            (std::vector<std::pair<size_t, size_t>>{{0, 3001}}));
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(RegexLongInputs, OneMegabyteOfText) {
  // GPT-2 and Llama 3 patterns cover every code point, so their pieces tile the text, and since the unit
  // ends with a newline every repeat of it splits the same way as the unit alone (worked out by hand).
  const std::string unit = "Hello world, this is  a test 123! déjà vu…\n";
  const Pieces gpt2_unit = {"Hello", " world", ",", " this", " is", " ", " a",
                            " test", " 123",   "!", " déjà", " vu", "…", "\n"};
  const Pieces llama3_unit = {"Hello", " world", ",",   " this", " is",   " ",   " a",
                              " test", " ",      "123", "!",     " déjà", " vu", "…\n"};
  ASSERT_EQ(split(kGpt2, unit), gpt2_unit);
  ASSERT_EQ(split(kLlama3, unit), llama3_unit);
  std::string text;
  while (text.size() < (1u << 20)) text += unit;
  const size_t repeats = text.size() / unit.size();
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& [pattern, unit_pieces] : {std::make_pair(kGpt2, gpt2_unit), std::make_pair(kLlama3, llama3_unit)}) {
    const Pieces pieces = split(pattern, text);
    ASSERT_EQ(pieces.size(), unit_pieces.size() * repeats) << pattern;
    for (size_t i = 0; i < pieces.size(); ++i) {
      ASSERT_EQ(pieces[i], unit_pieces[i % unit_pieces.size()]) << "piece " << i << " of " << pattern;
    }
  }
  EXPECT_LT(seconds_since(t0), 10.0);
}

// ---- differential test against std::regex (ECMAScript), an independent backtracking implementation ----
//
// Random patterns over a small alphabet, rendered twice: in our syntax and in ECMAScript. Atomic groups and
// possessive repeats have no ECMAScript form, so they are rendered through the classic emulation
// (?>X) == (?=(X))\N. Only non-nullable expressions are repeated, which keeps the two engines' different
// rules for empty loop iterations out of the comparison, and top-level patterns that can match empty are
// skipped (the engines advance differently after an empty match).
struct RandomPattern {
  std::string ours, ecma;
  bool nullable = false;
};

class PatternGenerator {
 public:
  explicit PatternGenerator(uint32_t seed) : rng_(seed) {}

  RandomPattern generate() {
    groups_ = 0;
    return expr(3);
  }

 private:
  std::mt19937 rng_;
  int groups_ = 0;

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  RandomPattern leaf() {
    static const char* const leaves[] = {"a", "b", "c", " ", ".", "[ab]", "[^a]", "[a-b]", "\\s", "\\S", "\\w"};
    const std::string l = leaves[pick(11)];
    return {l, l, false};
  }

  RandomPattern expr(int depth) {
    const int kind = depth <= 0 ? 0 : pick(8);
    switch (kind) {
      case 1:
      case 2: {  // concatenation
        RandomPattern a = expr(depth - 1), b = expr(depth - 1);
        return {a.ours + b.ours, a.ecma + b.ecma, a.nullable && b.nullable};
      }
      case 3: {  // alternation
        RandomPattern a = expr(depth - 1), b = expr(depth - 1);
        return {"(?:" + a.ours + "|" + b.ours + ")", "(?:" + a.ecma + "|" + b.ecma + ")", a.nullable || b.nullable};
      }
      case 4:
      case 5:
        return quantified(depth);
      case 6: {  // lookahead
        const bool negative = pick(2) == 0;
        RandomPattern a = expr(depth - 1);
        const std::string open = negative ? "(?!" : "(?=";
        return {open + a.ours + ")", open + a.ecma + ")", true};
      }
      case 7: {  // atomic group
        const int group = ++groups_;
        RandomPattern a = expr(depth - 1);
        return {"(?>" + a.ours + ")", "(?:(?=(" + a.ecma + "))\\" + std::to_string(group) + ")", a.nullable};
      }
      default:
        return leaf();
    }
  }

  RandomPattern quantified(int depth) {
    const int group = groups_ + 1;  // the capture number if this becomes a possessive emulation
    const bool possessive = pick(4) == 0;
    if (possessive) ++groups_;
    RandomPattern body = expr(depth - 1);
    if (body.nullable) {  // not repeatable; keep the reserved capture number used by an atomic group
      if (!possessive) return body;
      return {"(?>" + body.ours + ")", "(?:(?=(" + body.ecma + "))\\" + std::to_string(group) + ")", true};
    }
    static const char* const quantifiers[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
    const std::string q = quantifiers[pick(possessive ? 3 : 7)];
    const bool lazy = !possessive && pick(3) == 0;
    const bool min_zero = q == "*" || q == "?" || q == "{0,2}";
    const std::string ours = "(?:" + body.ours + ")" + q + (possessive ? "+" : lazy ? "?" : "");
    std::string ecma = "(?:" + body.ecma + ")" + q + (lazy ? "?" : "");
    if (possessive) ecma = "(?:(?=(" + ecma + "))\\" + std::to_string(group) + ")";
    return {ours, ecma, min_zero};
  }
};

std::vector<std::pair<size_t, size_t>> std_regex_find_all(const std::string& pattern, const std::string& text) {
  const std::regex re(pattern, std::regex::ECMAScript);
  std::vector<std::pair<size_t, size_t>> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.emplace_back(static_cast<size_t>(it->position(0)), static_cast<size_t>(it->position(0) + it->length(0)));
  }
  return out;
}

TEST(RegexDifferential, AgainstStdRegexOnRandomPatterns) {
  PatternGenerator gen(12345);
  std::mt19937 text_rng(777);
  int compared = 0;
  for (int i = 0; i < 1500; ++i) {
    const RandomPattern p = gen.generate();
    if (p.nullable) continue;
    const Regex ours(p.ours);
    for (int t = 0; t < 6; ++t) {
      std::string text;
      const size_t len = text_rng() % 14;
      for (size_t k = 0; k < len; ++k) text += "abc "[text_rng() % 4];
      const auto expected = std_regex_find_all(p.ecma, text);
      ASSERT_EQ(ours.find_all(utf8_to_codepoints(text)), expected)
          << "pattern " << p.ours << " (ECMAScript " << p.ecma << ") on \"" << text << "\"";
      ++compared;
    }
  }
  EXPECT_GT(compared, 3000);  // most random patterns are not nullable
}

}  // namespace
}  // namespace ga::text
