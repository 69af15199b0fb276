// The command line on every architecture family (the tiny transformers models of tests/data/arch, whose GGUFs
// carry a SentencePiece vocabulary): `run` generates, `inspect` names the architecture; and on what stays
// unsupported: a vision-language checkpoint or another architecture is one `error:` line and exit 1 for `run`,
// while `inspect` still lists the folder's config and tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/test_data.h"

namespace ga {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;

std::string arch_model(const std::string& name) { return test::repo_path("tests/data/arch/" + name + "/model.gguf"); }

TEST(CliFamilies, RunGeneratesOnEveryFamily) {
  for (const char* m : {"qwen3", "qwen3-yarn", "gemma2", "gemma3", "phi3", "phi3-longrope", "mixtral", "qwen2moe",
                        "qwen3moe"}) {
    SCOPED_TRACE(m);
    const CliResult r =
        run_cli({"run", "-m", arch_model(m), "-p", "Once upon a time", "-n", "8", "--temp", "0", "--device", "cpu",
                 "--ignore-eos", "--no-warmup"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty()) << "no text generated";
    const CliResult i = run_cli({"inspect", arch_model(m)});
    EXPECT_EQ(i.exit_code, 0) << i.err;
    EXPECT_NE(i.out.find("general.architecture"), std::string::npos);
  }
}

// --tensor-parallel splits the model over CPU ranks: the greedy text is the unsplit model's, on a GQA family with
// q/k norms and on a MoE family; a split the shapes do not allow is one error line.
TEST(CliFamilies, TensorParallelRunGivesTheSameText) {
  for (const char* m : {"qwen3", "qwen3moe"}) {
    SCOPED_TRACE(m);
    const std::vector<std::string> run = {"run", "-m", arch_model(m), "-p", "Once upon a time", "-n", "16", "--temp",
                                          "0", "--device", "cpu", "--ignore-eos", "--no-warmup"};
    std::vector<std::string> split = run;
    split.insert(split.end(), {"--tensor-parallel", "2"});
    const CliResult a = run_cli(run), b = run_cli(split);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(b.out, a.out);
    EXPECT_NE(b.err.find("tensor parallel over 2 ranks"), std::string::npos) << b.err;
  }
  const CliResult bad = run_cli({"run", "-m", arch_model("qwen3"), "-p", "x", "-n", "1", "--device", "cpu",
                                 "--tensor-parallel", "3"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("does not divide by 3"), std::string::npos) << bad.err;
}

// --context-parallel shards the sequence's positions over CPU ranks: the greedy text is the one-rank run's, on a
// family with sliding windows and soft-caps and on a GQA family; bad rank counts and combinations are one
// error line.
TEST(CliFamilies, ContextParallelRunGivesTheSameText) {
  for (const char* m : {"gemma2", "qwen3"}) {
    SCOPED_TRACE(m);
    const std::vector<std::string> run = {"run", "-m", arch_model(m), "-p", "Once upon a time there was", "-n", "16",
                                          "--temp", "0", "--device", "cpu", "--ignore-eos", "--no-warmup"};
    std::vector<std::string> split = run;
    split.insert(split.end(), {"--context-parallel", "3"});
    const CliResult a = run_cli(run), b = run_cli(split);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(b.out, a.out);
    EXPECT_NE(b.err.find("context parallel over 3 ranks"), std::string::npos) << b.err;
  }
  const std::vector<std::string> base = {"run", "-m", arch_model("qwen3"), "-p", "x", "-n", "1", "--device", "cpu"};
  std::vector<std::string> zero = base, both = base;
  zero.insert(zero.end(), {"--context-parallel", "0"});
  both.insert(both.end(), {"--context-parallel", "2", "--tensor-parallel", "2"});
  const CliResult z = run_cli(zero), t = run_cli(both);
  EXPECT_NE(z.exit_code, 0);
  EXPECT_NE(z.err.find("--context-parallel must be in 1..64"), std::string::npos) << z.err;
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.err.find("not built yet"), std::string::npos) << t.err;
}

// A copy of the qwen3 test folder claiming another class.
std::string folder_claiming(const std::string& cls) {
  const fs::path dir = fs::temp_directory_path() / ("ga_cli_family_" + std::to_string(getpid()) + "_" + cls);
  fs::create_directories(dir);
  fs::copy_file(test::repo_path("tests/data/arch/qwen3/model.safetensors"), dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  std::ifstream in(test::repo_path("tests/data/arch/qwen3/config.json"));
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "Qwen3ForCausalLM";
  config.replace(config.find(from), from.size(), cls);
  std::ofstream(dir / "config.json") << config;
  return dir.string();
}

TEST(CliFamilies, UnsupportedArchitecturesAreOneLineErrorsButInspectable) {
  for (const std::string cls : {"GPT2LMHeadModel", "Gemma3ForConditionalGeneration"}) {
    SCOPED_TRACE(cls);
    const std::string dir = folder_claiming(cls);
    const CliResult r = run_cli({"run", "-m", dir, "-p", "x", "-n", "1", "--device", "cpu"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(cls), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    const CliResult i = run_cli({"inspect", dir});
    EXPECT_EQ(i.exit_code, 0) << i.err;
    EXPECT_NE(i.out.find("not loadable"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << "the tensors are listed";
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace ga
