// `gpu-accel run` and `inspect` on rwkv.cpp files: the CLI's greedy text equals the same generation in process
// (the byte vocabulary's encode and decode, the Session, the sampler), and a PyTorch checkpoint is refused
// with the converter's name on one `error:` line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/test_data.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga {
namespace {

using test::CliResult;
using test::run_cli;

TEST(CliRwkv, RunGeneratesTheGreedyTextOfEveryVersion) {
  for (const char* name : {"tiny-rwkv-4v0-660K-FP16", "tiny-rwkv-5v1-730K-FP32", "tiny-rwkv-5v2-730K-FP32",
                           "tiny-rwkv-6v0-3m-Q5_1", "tiny-rwkv-7v0-834K-FP32"}) {
    SCOPED_TRACE(name);
    const std::string path = test::shared_path(std::string("models/rwkv-tiny/") + name + ".bin");
    const CliResult r = run_cli({"run", "-m", path, "-p", "hello", "-n", "16", "--temp", "0", "--device", "cpu"});
    ASSERT_EQ(r.exit_code, 0) << r.err;

    const LoadedModel model = load_model(path);
    const Tokenizer tok(model.vocab);
    SessionOptions so;
    so.n_threads = 1;
    Session session(model, so);
    GenerateOptions o;
    o.max_tokens = 16;
    o.sampling.temperature = 0.0f;
    const GenerateResult want = generate_from_tokens(session, tok, tok.encode("hello", false), o);
    ASSERT_EQ(want.tokens.size(), 16u);
    EXPECT_NE(r.out.find(want.text), std::string::npos) << "CLI printed: " << r.out << "\nexpected: " << want.text;

    const CliResult i = run_cli({"inspect", path});
    EXPECT_EQ(i.exit_code, 0) << i.err;
    EXPECT_NE(i.out.find("rwkv.version"), std::string::npos) << i.out;
  }
}

// A recurrent state cannot be sharded by position: --context-parallel is one error line, not a wrong text.
TEST(CliRwkv, ContextParallelIsRefused) {
  const std::string path = test::shared_path("models/rwkv-tiny/tiny-rwkv-5v2-730K-FP32.bin");
  const CliResult r =
      run_cli({"run", "-m", path, "-p", "hello", "-n", "4", "--device", "cpu", "--context-parallel", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("recurrent state"), std::string::npos) << r.err;
}

TEST(CliRwkv, PytorchCheckpointIsRefusedWithTheConverter) {
  test::TempDir dir("ga_cli_rwkv");
  const std::string pth = dir.file("RWKV-x070-World-0.1B.pth");
  std::ofstream(pth, std::ios::binary) << std::string("PK\x03\x04", 4) << std::string(100, '\0');
  const CliResult r = run_cli({"run", "-m", pth, "-p", "x", "-n", "1", "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("convert_pytorch_to_ggml.py"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("convert_hf_to_gguf.py"), std::string::npos) << r.err;
}

// convert-rwkv writes llama.cpp's GGUF layout of an rwkv.cpp file; `run` on it prints the .bin's greedy text.
TEST(CliRwkv, ConvertedGgufRunsTheSameText) {
  test::TempDir dir("ga_cli_rwkv");
  for (const char* name : {"tiny-rwkv-6v0-3m-Q5_1", "tiny-rwkv-7v0-834K-FP16"}) {
    SCOPED_TRACE(name);
    const std::string bin = test::shared_path(std::string("models/rwkv-tiny/") + name + ".bin");
    const std::string gguf = dir.file(std::string(name) + ".gguf");
    const CliResult c = run_cli({"convert-rwkv", bin, gguf});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    const std::vector<std::string> args = {"-p", "hello", "-n", "16", "--temp", "0", "--device", "cpu"};
    std::vector<std::string> a = {"run", "-m", bin}, b = {"run", "-m", gguf};
    a.insert(a.end(), args.begin(), args.end());
    b.insert(b.end(), args.begin(), args.end());
    const CliResult from_bin = run_cli(a), from_gguf = run_cli(b);
    ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.err;
    EXPECT_EQ(from_gguf.out, from_bin.out);
  }
  const CliResult v4 = run_cli({"convert-rwkv", test::shared_path("models/rwkv-tiny/tiny-rwkv-4v0-660K-FP32.bin"),
                                dir.file("v4.gguf")});
  EXPECT_EQ(v4.exit_code, 1);
  EXPECT_NE(v4.err.find("RWKV 6 and 7"), std::string::npos) << v4.err;
}

}  // namespace
}  // namespace ga
