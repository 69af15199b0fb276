// Helpers shared by the gpu-accel commands: model loading with a progress bar and a log line, and
// vocabulary loading without the weights (tokenize works on vocab-only GGUF files).
#pragma once

#include <string>

#include "gpu_accel/model.h"
#include "gpu_accel/tokenizer.h"

namespace ga::cli {

// Throws ga::Error(Io) naming the path when it does not exist (before any parsing), so a typo reads
// "no such file" and not a format error.
void require_exists(const std::string& path);

// ga::load_model with a progress bar on stderr when stderr is a terminal; logs the model, its size
// and the load time to stderr.
LoadedModel load_model_verbose(const std::string& path);

// The vocabulary of a .gguf file (read through ga::gguf::File: no weights needed) or of a Hugging
// Face folder (tokenizer.json and tokenizer_config.json).
Vocab load_vocab(const std::string& path);

bool stderr_is_tty();

}  // namespace ga::cli
