// A chat template is untrusted input (it comes with the model file). Malformed, deeply nested, endlessly looping
// or output-bombing templates must end in a ga::Error with a clear message: never a crash, a hang, or an
// unbounded allocation. Random mutations of real templates check that nothing but ga::Error ever escapes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/chat.h"
#include "gpu_accel/error.h"

namespace {

const std::vector<ga::ChatMessage> kConversation = {
    {"system", "You are helpful."}, {"user", "Hello"}, {"assistant", "Hi!"}, {"user", "Bye"}};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

// Parses and renders; returns the ga::Error it must end with.
ga::Error render_error(const std::string& source) {
  try {
    ga::ChatTemplate(source).apply(kConversation, {});
  } catch (const ga::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for template: " << source.substr(0, 200);
  return ga::Error(ga::ErrorKind::Internal, "no error");
}

TEST(ChatTemplateRobustness, SyntaxErrorsAreInvalidArgumentWithLineAndColumn) {
  const std::vector<std::string> bad = {
      "{% if x %}never closed",
      "{% for m in messages %}{{ m }}",
      "{{ x ",
      "{{ 1 + }}",
      "{% endif %}",
      "{% if %}{% endif %}",
      "{% for in messages %}{% endfor %}",
      "{# unterminated comment",
      "{{ 'unterminated }}",
      "{{ ) }}",
      "{{ [1, 2 }}",
      "{% if x %}{% endfor %}",
      "{% set %}",
      "{{ a.0x }}",
      "{{ x | }}",
      "{% macro m( %}{% endmacro %}",
      "{{ '\\x4' }}",
      "{{ 99999999999999999999 }}",
      "text\n  {{ @ }}",
      "{% break %}",
  };
  for (const std::string& src : bad) {
    SCOPED_TRACE(src);
    const ga::Error e = render_error(src);
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.message();
    EXPECT_EQ(e.message().rfind("chat template line ", 0), 0u) << e.message();
  }
  EXPECT_NE(render_error("a\nb\n  {{ @ }}").message().find("line 3:6"), std::string::npos);
}

TEST(ChatTemplateRobustness, UnsupportedConstructsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% include 'other.jinja' %}", "'include'"},
      {"{% extends 'base' %}", "'extends'"},
      {"{% raw %}x{% endraw %}", "'raw'"},
      {"{{ x | wordwrap }}", "filter 'wordwrap'"},
      {"{% if x is prime %}{% endif %}", "test 'prime'"},
      {"{% frobnicate %}", "'frobnicate'"},
      {"{% for x in y recursive %}{% endfor %}", "recursive"},
  };
  for (const auto& [src, named] : cases) {
    SCOPED_TRACE(src);
    const ga::Error e = render_error(src);
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unsupported) << e.message();
    EXPECT_NE(e.message().find(named), std::string::npos) << e.message();
  }
}

TEST(ChatTemplateRobustness, RuntimeErrorsAreInvalidArgument) {
  const std::vector<std::string> bad = {
      "{{ undefined_thing.attr }}",   "{{ messages[0].content + 1 }}", "{{ 1 / 0 }}",
      "{{ 1 // 0 }}",                 "{{ none | length }}",          "{{ undefined_fn() }}",
      "{{ 'x' in none }}",            "{{ [1, 2].append(3) }}",       "{% set a, b = [1] %}",
      "{{ 9223372036854775807 + 1 }}", "{{ {'a': 1} < 3 }}",          "{{ x | tojson }}",
      "{% set s = 'x' %}{% set s.attr = 1 %}",
  };
  for (const std::string& src : bad) {
    SCOPED_TRACE(src);
    const ga::Error e = render_error(src);
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.message();
    EXPECT_NE(e.message().find("line 1:"), std::string::npos) << e.message();
  }
}

TEST(ChatTemplateRobustness, DeepNestingIsAnErrorNotACrash) {
  const int depth = 1000;
  const std::vector<std::string> deep = {
      repeat("{% if true %}", depth) + "x" + repeat("{% endif %}", depth),
      repeat("{% for i in [1] %}", depth) + "x" + repeat("{% endfor %}", depth),
      "{{ " + repeat("(", depth) + "1" + repeat(")", depth) + " }}",
      "{{ " + repeat("[", depth) + repeat("]", depth) + " }}",
      "{{ " + repeat("not ", depth) + "x }}",
      "{{ " + repeat("-", depth) + "1 }}",
      "{{ x" + repeat("[0]", depth) + " }}",
      "{{ 1" + repeat(" + 1", 5000) + " }}",  // flat in the source, 5000 deep as a tree
  };
  for (const std::string& src : deep) {
    SCOPED_TRACE(src.substr(0, 40));
    const ga::Error e = render_error(src);
    EXPECT_TRUE(e.kind() == ga::ErrorKind::InvalidArgument || e.kind() == ga::ErrorKind::OutOfRange) << e.message();
  }
  // Nesting that real templates could plausibly use still works.
  EXPECT_EQ(ga::ChatTemplate("{{ 1" + repeat(" + 1", 100) + " }}").apply(kConversation, {}), "101");
  EXPECT_EQ(ga::ChatTemplate(repeat("{% if true %}", 30) + "ok" + repeat("{% endif %}", 30)).apply(kConversation, {}),
            "ok");
}

TEST(ChatTemplateRobustness, RunawayTemplatesHitLimits) {
  const std::vector<std::string> runaway = {
      // 10^10 iterations without output: the step budget stops it
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      // 10 MB of output
      "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
      // doubling a string in a namespace (no output at all)
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      // doubling a list
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
      "{{ 'x' * 100000000 }}",
      "{{ [0] * 100000000 }}",
      "{{ range(1000000000) }}",
      "{{ 2 ** 100000000 }}",
      // unbounded recursion through a macro
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      // output captured in a set block is capped as well
      "{% set big %}{% for i in range(100000) %}{{ 'y' * 50 }}{% endfor %}{% endset %}",
  };
  for (const std::string& src : runaway) {
    SCOPED_TRACE(src);
    const auto t0 = std::chrono::steady_clock::now();
    const ga::Error e = render_error(src);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(e.kind() == ga::ErrorKind::OutOfRange || e.kind() == ga::ErrorKind::InvalidArgument) << e.message();
    EXPECT_LT(seconds, 5.0);
  }
}

TEST(ChatTemplateRobustness, ReferenceCyclesAndSharedUseAreSafe) {
  // A namespace holding itself and a macro kept in a namespace form reference cycles; the render must break
  // them up (a sanitizer build reports any leak) and still produce jinja2's text.
  const ga::ChatTemplate cyclic(
      "{% set ns = namespace(n=1) %}{% set ns.me = ns %}{% macro m() %}M{% endmacro %}{% set ns.m = m %}"
      "{% for x in [1] %}{% set ns.loop = loop %}{% endfor %}{{ ns.me.me.n }}{{ ns.m() }}");
  EXPECT_EQ(cyclic.apply(kConversation, {}), "1M");

  // One parsed template renders from several threads at once.
  const ga::ChatTemplate tmpl(ga::ChatTemplate::chatml_source());
  const std::string expected = tmpl.apply(kConversation, {});
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) mismatches[static_cast<size_t>(t)] += tmpl.apply(kConversation, {}) != expected;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ChatTemplateRobustness, RandomMutationsOfRealTemplatesOnlyEverThrowGaError) {
  const std::filesystem::path dir = ga::test::repo_path("tests/data/chat_templates/templates");
  std::vector<std::string> sources;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) sources.push_back(ga::test::read_file(entry.path()));
  ASSERT_GT(sources.size(), 10u);
  std::sort(sources.begin(), sources.end());  // directory order is not stable; the seed must mean the same cases
  std::mt19937 rng(12345);
  const std::string alphabet = "{}%#-+()[]'\".|,:=~*/ \nifforendsetnotinisx0";
  int rendered = 0, failed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src = sources[rng() % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !src.empty(); ++k) {
      const size_t at = rng() % src.size();
      switch (rng() % 3) {
        case 0: src.erase(at, 1 + rng() % 8); break;
        case 1: src.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: src.insert(at, src.substr(rng() % src.size(), rng() % 16)); break;
      }
    }
    try {
      ga::ChatTemplate(src).apply(kConversation, {});
      ++rendered;
    } catch (const ga::Error&) {
      ++failed;
    }
  }
  EXPECT_GT(rendered, 100);  // mutations that keep the template valid still render
  EXPECT_GT(failed, 100);
}

}  // namespace
