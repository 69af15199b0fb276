// `--precision` and `--precision-keep` through the gpu-accel binary: the line logged at load, the device line, inspect's
// table of the converted model, greedy text that stays the same where nothing can convert (stories260K's 64-column
// matrices), and usage errors that name the option and the value on every command that takes them (run, chat,
// bench, bench-serve, serve, logits, inspect).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/process.h"
#include "common/test_data.h"

namespace ga {
namespace {

using test::CliResult;
using test::describe;
using test::run_cli;

std::string stories() { return test::shared_path("models/tinyllamas/stories260K.gguf"); }
std::string fixture_f32() { return test::shared_path("fixtures/quant/fixture-f32.gguf"); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CliPrecision, TheChoiceIsLoggedOnceAtLoadAndInTheDeviceLine) {
  const std::vector<std::string> run = {"run", "-m", fixture_f32(), "-p", "Once", "-n", "4", "--temp", "0"};
  struct Case {
    std::vector<std::string> extra;
    std::string line, device;
  };
  for (const Case& c : {Case{{}, "precision: native (weights as stored)\n", "threads, context"},
                        Case{{"--precision", "auto"}, "precision: native (auto: no FP8 on the CPU)", "threads, context"},
                        Case{{"--precision", "fp8", "--precision-keep", "none"},
                             "precision: fp8; 14 matrices F8_B128, kept F32: embeddings, output, norms\n",
                             "threads, weights fp8, context"},
                        Case{{"--precision", "fp8", "--precision-keep", "-1"},
                             "precision: fp8; 7 matrices F8_B128, kept F32: embeddings, output, norms, layer 1\n",
                             "threads, weights fp8, context"},
                        Case{{"--precision", "bf16"}, "precision: bf16; 16 matrices BF16\n", "weights bf16"}}) {
    std::vector<std::string> args = run;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_TRUE(has(r.err, c.line)) << describe(r);
    EXPECT_EQ(r.err.find("precision: "), r.err.rfind("precision: ")) << "logged once: " << describe(r);
    EXPECT_TRUE(has(r.err, c.device)) << describe(r);
  }
}

TEST(CliPrecision, InspectShowsTheConvertedTypes) {
  const CliResult r = run_cli({"inspect", fixture_f32(), "--precision", "fp8", "--precision-keep", "0"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(has(r.out, "precision: fp8; 7 matrices F8_B128")) << r.out;
  EXPECT_TRUE(has(r.out, "blk.1.attn_q.weight       F8_B128")) << r.out;
  EXPECT_TRUE(has(r.out, "blk.0.attn_q.weight       F32")) << r.out;
  EXPECT_TRUE(has(r.out, "token_embd.weight         F32")) << r.out;
}

// The stories260K check: under fp8 it cannot convert (64-column matrices), so 64 greedy tokens are the
// native ones, and the log says why.
TEST(CliPrecision, Stories260KGreedyTextIsTheNativeTextUnderFp8) {
  const std::vector<std::string> run = {"run", "-m", stories(), "-p", "Once upon a time", "-n", "64", "--temp", "0"};
  std::vector<std::string> fp8 = run;
  fp8.insert(fp8.end(), {"--precision", "fp8", "--precision-keep", "none"});
  const CliResult a = run_cli(run), b = run_cli(fp8);
  ASSERT_EQ(a.exit_code, 0) << describe(a);
  ASSERT_EQ(b.exit_code, 0) << describe(b);
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(b.out, a.out);
  EXPECT_TRUE(has(b.err, "0 matrices F8_B128")) << describe(b);
  EXPECT_TRUE(has(b.err, "35 stay as stored (rows not a multiple of 128)")) << describe(b);
  EXPECT_FALSE(has(b.err, "weights fp8")) << "nothing converted: " << describe(b);
}

TEST(CliPrecision, BadValuesAreUsageErrorsNamingTheOptionAndTheValue) {
  const std::string m = stories();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<std::string> bad_mode = {"--precision", "fp9"};
  const std::vector<std::string> bad_list = {"--precision-keep", "0,x"};
  std::vector<Case> cases;
  for (const std::vector<std::string>& prefix :
       {std::vector<std::string>{"run", "-m", m, "-p", "x"}, std::vector<std::string>{"chat", "-m", m},
        std::vector<std::string>{"bench", "-m", m, "-p", "1", "-n", "1"}, std::vector<std::string>{"serve", "-m", m},
        std::vector<std::string>{"inspect", m}, std::vector<std::string>{"bench-serve", "-m", m},
        std::vector<std::string>{"logits", "-m", m, "--tokens", "1,2"}}) {
    std::vector<std::string> a = prefix, b = prefix;
    a.insert(a.end(), bad_mode.begin(), bad_mode.end());
    b.insert(b.end(), bad_list.begin(), bad_list.end());
    cases.push_back({a, {"--precision:", "'fp9'"}});
    cases.push_back({b, {"--precision-keep:", "'0,x'"}});
  }
  // a layer the model does not have: known only once it is loaded, still a usage error naming the option
  cases.push_back({{"run", "-m", m, "-p", "x", "--precision", "fp8", "--precision-keep", "0,5"},
                   {"--precision-keep:", "layer 5", "5 layers"}});
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(r.out, "") << describe(r);
    const size_t at = r.err.find("error: ");
    ASSERT_NE(at, std::string::npos) << describe(r);
    const std::string line = r.err.substr(at);
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << describe(r);
    for (const std::string& part : c.mentions) EXPECT_TRUE(has(line, part)) << part << ": " << describe(r);
  }
}

// --kv-type: the FP8 cache runs on the CPU and says so; an unknown type is a usage error listing the choices on
// every command that takes it, and f32 on a GPU is refused before any work.
TEST(CliKvType, Fp8RunsAndBadTypesAreUsageErrorsListingTheChoices) {
  const std::string m = stories();
  const CliResult ok =
      run_cli({"run", "-m", m, "-p", "Once upon a time", "-n", "8", "--temp", "0", "--kv-type", "fp8"});
  ASSERT_EQ(ok.exit_code, 0) << describe(ok);
  EXPECT_FALSE(ok.out.empty());
  EXPECT_TRUE(has(ok.err, "KV cache: fp8")) << describe(ok);
  std::vector<std::vector<std::string>> cases;
  for (const std::vector<std::string>& prefix :
       {std::vector<std::string>{"run", "-m", m, "-p", "x"}, std::vector<std::string>{"chat", "-m", m},
        std::vector<std::string>{"bench", "-m", m, "-p", "1", "-n", "1"}, std::vector<std::string>{"serve", "-m", m},
        std::vector<std::string>{"bench-serve", "-m", m}}) {
    std::vector<std::string> a = prefix;
    a.insert(a.end(), {"--kv-type", "xyz"});
    cases.push_back(a);
  }
  for (const std::vector<std::string>& args : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    const size_t at = r.err.find("error: ");
    ASSERT_NE(at, std::string::npos) << describe(r);
    const std::string line = r.err.substr(at);
    for (const char* part : {"--kv-type", "'xyz'", "f16", "fp8", "f32"}) EXPECT_TRUE(has(line, part)) << describe(r);
  }
  const CliResult gpu_f32 = run_cli({"run", "-m", m, "-p", "x", "--device", "cuda", "--kv-type", "f32"});
  EXPECT_EQ(gpu_f32.exit_code, 2) << describe(gpu_f32);
  EXPECT_TRUE(has(gpu_f32.err, "f16 or fp8")) << describe(gpu_f32);
}

}  // namespace
}  // namespace ga
