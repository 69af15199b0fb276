// The gpu-accel subcommands. Each lives in its own cmd_<name>.cpp and returns the process exit
// code; errors are reported as one line on stderr by main() (ga::Error) or by the command.
#pragma once

namespace ga::cli {

int cmd_run(int argc, char** argv);       // generate a continuation of a prompt
int cmd_tokenize(int argc, char** argv);  // print token ids
int cmd_inspect(int argc, char** argv);   // print metadata and the tensor table
int cmd_logits(int argc, char** argv);    // write the logits of given token ids (parity checks)

}  // namespace ga::cli
