// The gpu-accel subcommands. Each lives in its own cmd_<name>.cpp and returns the process exit
// code; errors are reported as one line on stderr by main() (ga::Error) or by the command.
#pragma once

namespace ga::cli {

int cmd_run(int argc, char** argv);       // generate a continuation of a prompt
int cmd_chat(int argc, char** argv);      // an interactive conversation through the chat template
int cmd_tokenize(int argc, char** argv);  // print token ids
int cmd_inspect(int argc, char** argv);   // print metadata and the tensor table
int cmd_logits(int argc, char** argv);    // write the logits of given token ids (parity checks)
int cmd_serve(int argc, char** argv);     // OpenAI-compatible HTTP server (apps/server)
int cmd_bench(int argc, char** argv);       // pp/tg throughput against measured ceilings
int cmd_bench_serve(int argc, char** argv);  // continuous-batching throughput / TTFT with N clients
int cmd_quantize(int argc, char** argv);    // re-quantize a GGUF model (llama-quantize)
int cmd_make_model(int argc, char** argv);  // write a random-weight model of a real shape
int cmd_convert_rwkv(int argc, char** argv);  // an rwkv.cpp RWKV 6/7 file as llama.cpp-layout GGUF
int cmd_launch(int argc, char** argv);      // N local ranks of a command with torchrun's variables

}  // namespace ga::cli
