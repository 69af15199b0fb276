// load_model's dispatch on the kind of path.
//
// A folder is a Hugging Face checkpoint, a file is GGUF: the path's kind decides, not its name, so a
// GGUF without the .gguf extension still loads and a typo gets an Io error naming the path.
#include <filesystem>

#include "gpu_accel/error.h"
#include "gpu_accel/model.h"

namespace ga {

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  GA_CHECK(!ec && std::filesystem::exists(st), Io, "cannot open model '", path, "': no such file or directory");
  if (std::filesystem::is_directory(st)) return load_hf_model(path, options);
  return load_gguf_model(path, options);
}

}  // namespace ga
