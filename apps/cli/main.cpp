// gpu-accel: the command-line entry point. Dispatches to one function per subcommand.
//
// Every failure ends here as ONE line "error: ..." on stderr: usage errors exit 2 (like most Unix
// tools), runtime errors (missing or corrupt files, unsupported models, a prompt too long) exit 1.
// ga::Error prints its message without the source location, which is for developers, not users.
// SIGPIPE is ignored so that `gpu-accel run ... | head` ends with a failed write, not a signal.
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "args.h"
#include "commands.h"
#include "gpu_accel/error.h"
#include "version.h"

namespace {

constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;

const char* const kUsage =
    "usage: gpu-accel <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       generate a continuation of a prompt (streams text to stdout)\n"
    "  chat      an interactive conversation through the model's chat template\n"
    "  tokenize  print the token ids of a text\n"
    "  inspect   print a model's metadata and tensor table\n"
    "  logits    write the logits of given token ids (parity checks)\n"
    "  serve     serve a model over an OpenAI-compatible HTTP API\n"
    "  bench     prompt / generation throughput against measured ceilings\n"
    "  bench-serve  continuous-batching throughput and time to first token with N clients\n"
    "  quantize  re-quantize a GGUF model (llama.cpp types and k-quant mixes)\n"
    "  make-model  write a random-weight model of a real shape (any family, RWKV 6/7 in llama.cpp's layout)\n"
    "  convert-rwkv  write an rwkv.cpp RWKV 6/7 file as a GGUF in llama.cpp's layout\n"
    "  launch    run a command as N local ranks with torchrun's variables (multi-process jobs)\n"
    "\n"
    "  gpu-accel <command> --help   options of a command\n"
    "  gpu-accel --version          version, git commit and build options\n";

int dispatch(int argc, char** argv) {
  if (argc < 2) throw ga::cli::UsageError("no command given (try 'gpu-accel --help')");
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "--version" || command == "-v") {
    std::cout << ga::cli::version_text();
    return 0;
  }
  if (command == "run") return ga::cli::cmd_run(argc, argv);
  if (command == "chat") return ga::cli::cmd_chat(argc, argv);
  if (command == "tokenize") return ga::cli::cmd_tokenize(argc, argv);
  if (command == "inspect") return ga::cli::cmd_inspect(argc, argv);
  if (command == "logits") return ga::cli::cmd_logits(argc, argv);
  if (command == "serve") return ga::cli::cmd_serve(argc, argv);
  if (command == "bench") return ga::cli::cmd_bench(argc, argv);
  if (command == "bench-serve") return ga::cli::cmd_bench_serve(argc, argv);
  if (command == "quantize") return ga::cli::cmd_quantize(argc, argv);
  if (command == "make-model") return ga::cli::cmd_make_model(argc, argv);
  if (command == "convert-rwkv") return ga::cli::cmd_convert_rwkv(argc, argv);
  if (command == "launch") return ga::cli::cmd_launch(argc, argv);
  throw ga::cli::UsageError("unknown command '" + command + "' (try 'gpu-accel --help')");
}

// Messages may carry newlines (e.g. a nested error); the contract is one line.
std::string one_line(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return dispatch(argc, argv);
  } catch (const ga::cli::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const ga::Error& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.message()).c_str());
    return kExitRuntimeError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return kExitRuntimeError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return kExitRuntimeError;
  }
}
