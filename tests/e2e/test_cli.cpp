// End-to-end tests of the gpu-accel binary: runs it as a user would (posix_spawn, stdout and stderr
// captured to files, exit code checked).
//
// The key check is byte-exact: for every case of llama2.c run.c's greedy reference for stories260K,
// `gpu-accel run --temp 0` must print exactly the continuation run.c printed after the prompt, which
// must also equal what our tokenizer decodes from the reference's generated ids. Reference
// conventions (see the JSON's description): token_ids = BOS + prompt + generated, so run.c generated
// len(token_ids) - len(prompt_token_ids) tokens (steps - len(prompt) + 1: the last position's
// prediction is printed too); stdout_text = prompt text + continuation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/test_data.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/tokenizer.h"

namespace ga {
namespace {

using test::CliResult;
using test::describe;
using test::run_cli;
using test::TempDir;

std::string model_path() { return test::shared_path("models/tinyllamas/stories260K.gguf"); }

// A failure must be exactly one line "error: ..." on stderr, with nothing on stdout.
void expect_one_line_error(const CliResult& r, int exit_code, const std::string& mentions = {}) {
  EXPECT_EQ(r.exit_code, exit_code) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  // Only the error line (loading logs may precede it on stderr; the error itself is one line).
  const size_t at = r.err.find("error: ");
  ASSERT_NE(at, std::string::npos) << describe(r);
  EXPECT_TRUE(at == 0 || r.err[at - 1] == '\n') << describe(r);
  const std::string line = r.err.substr(at);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "error is not one line: " << describe(r);
  EXPECT_EQ(r.err.find("error: ", at + 1), std::string::npos) << describe(r);
  if (!mentions.empty()) {
    EXPECT_NE(line.find(mentions), std::string::npos) << describe(r);
  }
}

struct ReferenceCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> all_ids;
  std::string stdout_text;
};

std::vector<ReferenceCase> reference_cases() {
  const auto j = nlohmann::json::parse(
      test::read_file(test::shared_path("models/tinyllamas/stories260K.greedy-reference.json")));
  std::vector<ReferenceCase> cases;
  for (const auto& c : j.at("cases")) {
    cases.push_back({c.at("prompt").get<std::string>(), c.at("prompt_token_ids").get<std::vector<int32_t>>(),
                     c.at("token_ids").get<std::vector<int32_t>>(), c.at("stdout_text").get<std::string>()});
  }
  return cases;
}

TEST(Cli, GreedyRunPrintsExactlyTheReferenceContinuation) {
  const Tokenizer tok(Vocab::from_gguf(gguf::File::open(model_path())));
  const auto cases = reference_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& c : cases) {
    SCOPED_TRACE("prompt '" + c.prompt + "'");
    // The continuation two independent ways: run.c's printed text minus the prompt it printed
    // first, and our tokenizer's decode of the generated ids after the prompt's.
    ASSERT_EQ(c.stdout_text.substr(0, c.prompt.size()), c.prompt);
    const std::string from_run_c = c.stdout_text.substr(c.prompt.size());
    const std::string prompt_text = tok.decode(c.prompt_ids);
    const std::string all_text = tok.decode(c.all_ids);
    ASSERT_EQ(all_text.substr(0, prompt_text.size()), prompt_text);
    const std::string from_decode = all_text.substr(prompt_text.size());
    EXPECT_EQ(from_decode, from_run_c);

    const size_t n_generated = c.all_ids.size() - c.prompt_ids.size();
    const CliResult r = run_cli({"run", "-m", model_path(), "--temp", "0", "-p", c.prompt, "-n",
                                 std::to_string(n_generated), "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out, from_run_c);
    EXPECT_EQ(r.out, from_decode);
    EXPECT_NE(r.err.find("device: cpu"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("generated: " + std::to_string(n_generated) + " tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("prompt: " + std::to_string(c.prompt_ids.size()) + " tokens"), std::string::npos)
        << r.err;
  }
}

TEST(Cli, StopStringEndsTheOutputBeforeIt) {
  const auto c = reference_cases()[1];
  const std::string continuation = c.stdout_text.substr(c.prompt.size());
  const size_t at = continuation.find("little girl");
  ASSERT_NE(at, std::string::npos);
  const CliResult r =
      run_cli({"run", "-m", model_path(), "--temp", "0", "-p", c.prompt, "-n", "60", "--stop", "little girl"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, continuation.substr(0, at));
  EXPECT_NE(r.err.find("finish: stop"), std::string::npos) << r.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  auto sample = [](const std::string& seed) {
    const CliResult r = run_cli({"run", "-m", model_path(), "-p", "Once upon a time", "-n", "60", "--temp", "1.0",
                                 "--seed", seed});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("seed: " + seed + "\n"), std::string::npos) << r.err;
    return r.out;
  };
  const std::string a = sample("42");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, sample("42"));
  EXPECT_NE(a, sample("43"));
  // Without --seed the chosen seed is printed, so the run can be repeated.
  const CliResult r = run_cli({"run", "-m", model_path(), "-p", "Hi", "-n", "4"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("seed: "), std::string::npos) << r.err;
}

// --time-prompt-again times the same prompt's prefill again on the emptied session (the warm reference
// of the first prompt time) without changing the generated text; start-up times are printed too.
TEST(Cli, TimePromptAgainReportsTheRepeatedPrefill) {
  const auto c = reference_cases()[0];
  const std::vector<std::string> base = {"run",     "-m", model_path(), "--temp", "0", "-p",
                                         c.prompt, "-n", "8",          "-t",     "2"};
  std::vector<std::string> again = base;
  again.insert(again.end(), {"--time-prompt-again", "3"});
  const CliResult plain = run_cli(base), timed = run_cli(again);
  ASSERT_EQ(timed.exit_code, 0) << describe(timed);
  EXPECT_EQ(timed.out, plain.out);
  const std::string want = "prompt again: " + std::to_string(c.prompt_ids.size()) + " tokens in ";
  EXPECT_NE(timed.err.find(want), std::string::npos) << timed.err;
  EXPECT_NE(timed.err.find("(median of 3); first / again = "), std::string::npos) << timed.err;
  EXPECT_EQ(plain.err.find("prompt again:"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("start-up: session "), std::string::npos) << plain.err;
  expect_one_line_error(run_cli({"run", "-m", model_path(), "-p", "x", "--time-prompt-again", "-1"}), 2,
                        "--time-prompt-again");
}

TEST(Cli, TokenizeMatchesTheReferenceIds) {
  for (const auto& c : reference_cases()) {
    if (c.prompt.empty()) continue;
    // (appends, not "a" + b: g++ 12 -O3 warns falsely about restrict in such concatenations)
    std::string expected, no_bos;
    for (size_t i = 0; i < c.prompt_ids.size(); ++i) {
      if (i > 0) expected += ' ';
      expected += std::to_string(c.prompt_ids[i]);
      if (i > 1) no_bos += ' ';
      if (i > 0) no_bos += std::to_string(c.prompt_ids[i]);
    }
    const CliResult r = run_cli({"tokenize", "-m", model_path(), "-p", c.prompt});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out, expected + "\n");
    const CliResult nb = run_cli({"tokenize", "-m", model_path(), "-p", c.prompt, "--no-bos"});
    EXPECT_EQ(nb.exit_code, 0) << describe(nb);
    EXPECT_EQ(nb.out, no_bos + "\n");
  }
}

TEST(Cli, InspectListsEveryTensor) {
  const gguf::File file = gguf::File::open(model_path());
  ASSERT_EQ(file.tensors().size(), 48u);  // SOURCES.md: 48 tensors, 19 metadata keys
  const CliResult r = run_cli({"inspect", model_path()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("tensors: 48,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata: 19 keys"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("general.architecture = \"llama\""), std::string::npos) << r.out;
  // One table row per tensor: the name followed by its type.
  std::istringstream lines(r.out);
  std::string line;
  size_t rows = 0;
  while (std::getline(lines, line)) {
    for (const auto& t : file.tensors()) {
      std::string start = "  ";
      start.append(t.name).append(" ");
      std::string bytes = " ";
      bytes.append(std::to_string(t.nbytes)).append(" ");
      if (line.rfind(start, 0) == 0) {
        ++rows;
        EXPECT_NE(line.find("F32"), std::string::npos) << line;
        EXPECT_NE(line.find(bytes), std::string::npos) << line;
      }
    }
  }
  EXPECT_EQ(rows, 48u);
}

TEST(Cli, HelpOfEveryCommand) {
  const CliResult help = run_cli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: gpu-accel"), std::string::npos);
  for (const char* cmd : {"run", "chat", "tokenize", "inspect"}) {
    const CliResult r = run_cli({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.out.find(std::string("usage: gpu-accel ") + cmd), std::string::npos) << r.out;
  }
}

// --version: the version, the commit the build was configured from, and the build's options, one per line.
TEST(Cli, VersionNamesTheCommitAndTheBuildOptions) {
  const CliResult version = run_cli({"--version"});
  EXPECT_EQ(version.exit_code, 0) << describe(version);
  const std::string commit = GA_BUILD_GIT_COMMIT;
  EXPECT_TRUE(commit == "unknown" ||
              (commit.size() >= 7 && commit.find_first_not_of("0123456789abcdef") == std::string::npos))
      << commit;
  EXPECT_EQ(version.out, std::string("gpu-accel ") + GA_VERSION + "\ncommit: " + commit + "\ncuda: " + GA_BUILD_CUDA +
                             "\nserver: " + GA_BUILD_SERVER_TEXT + "\n");
  const std::string cuda = GA_BUILD_CUDA;
  EXPECT_TRUE(cuda == "off" || cuda.rfind("on (archs ", 0) == 0) << cuda;
  EXPECT_EQ(run_cli({"-v"}).out, version.out);
}

TEST(Cli, UsageErrorsAreOneLineAndExit2) {
  const std::string m = model_path();
  expect_one_line_error(run_cli({}), 2);
  expect_one_line_error(run_cli({"frobnicate"}), 2, "frobnicate");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--bogus"}), 2, "--bogus");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "-n"}), 2, "-n");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "-n", "abc"}), 2, "abc");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--temp", "1.5x"}), 2, "1.5x");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--top-p", "2"}), 2, "--top-p");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--min-p", "-1"}), 2, "--min-p");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--temp", "-0.5"}), 2, "--temp");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--seed", "-3"}), 2, "--seed");
  expect_one_line_error(run_cli({"run", "-m", m, "-p", "x", "--stop", ""}), 2, "--stop");
  expect_one_line_error(run_cli({"run", "-p", "x"}), 2, "-m");
  expect_one_line_error(run_cli({"run", "-m", m}), 2, "-p");
  expect_one_line_error(run_cli({"tokenize", "-m", m, "-p", "x", "--ignore-eos"}), 2, "--ignore-eos");
  expect_one_line_error(run_cli({"inspect"}), 2, "MODEL");
}

TEST(Cli, RuntimeErrorsAreOneLineAndExit1) {
  const std::string missing = "/nonexistent/dir/model.gguf";
  expect_one_line_error(run_cli({"run", "-m", missing, "-p", "x"}), 1, missing);
  expect_one_line_error(run_cli({"tokenize", "-m", missing, "-p", "x"}), 1, missing);
  expect_one_line_error(run_cli({"inspect", missing}), 1, missing);

  // A truncated copy of a real model: a corrupt file.
  TempDir tmp("ga_e2e");
  const std::string bytes = test::read_file(model_path());
  for (size_t keep : {size_t{10}, bytes.size() / 2}) {
    const std::string corrupt = tmp.file("truncated_" + std::to_string(keep) + ".gguf");
    std::ofstream(corrupt, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    expect_one_line_error(run_cli({"run", "-m", corrupt, "-p", "x"}), 1);
    expect_one_line_error(run_cli({"inspect", corrupt}), 1);
  }

  // A prompt longer than the context: both numbers in the message, nothing generated.
  const auto c = reference_cases()[3];
  const CliResult r = run_cli({"run", "-m", model_path(), "-p", c.prompt, "--ctx", "8", "--temp", "0"});
  expect_one_line_error(r, 1, std::to_string(c.prompt_ids.size()));
  EXPECT_NE(r.err.find("8"), std::string::npos);
}

}  // namespace
}  // namespace ga
