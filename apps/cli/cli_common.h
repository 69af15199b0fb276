// Helpers shared by the gpu-accel commands: model loading with a progress bar and a log line, and
// vocabulary loading without the weights (tokenize works on vocab-only GGUF files), generated text to stdout.
#pragma once

#include <string>
#include <string_view>

#include "gpu_accel/model.h"
#include "gpu_accel/tokenizer.h"
#include "precision_args.h"

namespace ga::cli {

// Throws ga::Error(Io) naming the path when it does not exist (before any parsing), so a typo reads
// "no such file" and not a format error.
void require_exists(const std::string& path);

// ga::load_model with a progress bar on stderr when stderr is a terminal, then apply_precision for the device the
// model will run on ("auto" resolves by that device's compute capability); logs the model, its size, the load time
// and the precision line to stderr.
LoadedModel load_model_verbose(const std::string& path, const PrecisionArgs& precision = {},
                               const std::string& device = "cpu");

// The vocabulary of a .gguf file (read through ga::gguf::File: no weights needed) or of a Hugging
// Face folder (tokenizer.json and tokenizer_config.json).
Vocab load_vocab(const std::string& path);

bool stderr_is_tty();

// Generated text to stdout, flushed per piece so that it streams. A failed write stops the generation (write()
// returns false); the reader of a pipe going away (`| head`, EPIPE) is a normal way to end, like for any Unix
// filter, and any other error is reported once the generation has stopped (report_error()).
class TextOut {
 public:
  bool write(std::string_view text);
  // Prints "error: writing the generated text to stdout failed: ..." and returns true when a write failed for
  // another reason than EPIPE.
  bool report_error() const;
  bool failed() const { return errno_ != 0; }

 private:
  int errno_ = 0;
};

}  // namespace ga::cli
