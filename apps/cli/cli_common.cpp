// Model loading for the CLI (see cli_common.h).
//
// The progress bar is drawn only on a terminal: in a pipe or a log file a stream of "\r" updates is
// noise. It redraws only when the shown percentage changes, so a loader that reports per tensor
// costs nothing, and it erases itself when done so the log lines that follow start clean.
#include "cli_common.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "args.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::cli {

namespace {

constexpr int kBarWidth = 40;

class ProgressBar {
 public:
  void update(uint64_t done, uint64_t total) {
    if (total == 0) return;
    const int percent = static_cast<int>(done >= total ? 100 : done * 100 / total);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    const int filled = percent * kBarWidth / 100;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kBarWidth - filled), ' ');
    std::fprintf(stderr, "\rloading [%s] %3d%%", bar.c_str(), percent);
    std::fflush(stderr);
    drawn_ = true;
  }
  ~ProgressBar() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");  // erase the bar's line
  }

 private:
  int last_percent_ = -1;
  bool drawn_ = false;
};

}  // namespace

bool stderr_is_tty() { return isatty(fileno(stderr)) == 1; }

bool TextOut::write(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    errno_ = errno != 0 ? errno : EIO;
    return false;
  }
  return true;
}

bool TextOut::report_error() const {
  if (errno_ == 0 || errno_ == EPIPE) return false;
  std::fprintf(stderr, "error: writing the generated text to stdout failed: %s\n", std::strerror(errno_));
  return true;
}

void require_exists(const std::string& path) {
  std::error_code ec;
  GA_CHECK(std::filesystem::exists(path, ec), Io, "no such file or directory: ", path);
}

LoadedModel load_model_verbose(const std::string& path, const PrecisionArgs& precision, const std::string& device) {
  const PrecisionOptions precision_opts = precision_options(precision);  // a malformed option fails before the load
  require_exists(path);
  const auto start = std::chrono::steady_clock::now();
  LoadedModel model;
  {
    ProgressBar bar;
    LoadOptions options;
    if (stderr_is_tty()) options.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
    model = load_model(path, options);
  }
  try {
    apply_precision(model, precision_opts, precision_target(device));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::InvalidArgument) throw;
    throw UsageError("--precision-keep: " + e.message());  // the one argument only the model can check
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "model: %s (%s, %s, %lld layers, n_embd %lld, vocab %lld, %.2f MiB of weights)\n",
               model.config.name.empty() ? path.c_str() : model.config.name.c_str(), model.config.arch.c_str(),
               model.format.c_str(), static_cast<long long>(model.config.n_layer),
               static_cast<long long>(model.config.n_embd), static_cast<long long>(model.config.n_vocab),
               static_cast<double>(model.weight_bytes()) / (1024.0 * 1024.0));
  std::fprintf(stderr, "load time: %.1f ms\n", ms);
  std::fprintf(stderr, "precision: %s\n", model.precision.detail.c_str());
  return model;
}

Vocab load_vocab(const std::string& path) {
  require_exists(path);
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    const fs::path tokenizer_json = dir / "tokenizer.json";
    GA_CHECK(fs::exists(tokenizer_json), Io, "no tokenizer.json in ", path);
    const fs::path config = dir / "tokenizer_config.json";
    return Vocab::from_hf_json(tokenizer_json.string(), fs::exists(config) ? config.string() : std::string());
  }
  return Vocab::from_gguf(gguf::File::open(path));
}

}  // namespace ga::cli
