// load_model's dispatch on the kind of path.
//
// A folder is a Hugging Face checkpoint, a file starting with 'ggmf' an rwkv.cpp model, any other file GGUF: the path's kind decides, not its name, so a
// GGUF without the .gguf extension still loads and a typo gets an Io error naming the path.
#include <cstdio>
#include <filesystem>

#include "gpu_accel/error.h"
#include "gpu_accel/model.h"

namespace ga {

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  GA_CHECK(!ec && std::filesystem::exists(st), Io, "cannot open model '", path, "': no such file or directory");
  if (std::filesystem::is_directory(st)) return load_hf_model(path, options);
  if (is_rwkv_cpp_file(path)) return load_rwkv_model(path, options);
  // A PyTorch checkpoint (a zip archive since torch 1.6, a pickle before): BlinkDL's RWKV .pth files
  // are the usual case, and rwkv.cpp's converter makes a file gpu_accel reads.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  unsigned char head[2] = {0, 0};
  const bool got = f != nullptr && std::fread(head, 1, 2, f) == 2;
  if (f != nullptr) std::fclose(f);
  GA_CHECK(!(got && ((head[0] == 'P' && head[1] == 'K') || head[0] == 0x80)), Unsupported, "'", path,
           "' is a PyTorch checkpoint (a pickle), which gpu_accel does not read; for a BlinkDL RWKV .pth, convert it ",
           "with rwkv.cpp's python/convert_pytorch_to_ggml.py and load the .bin it writes, or, from a Hugging Face ",
           "folder of the model, with llama.cpp's convert_hf_to_gguf.py (RWKV 6/7) and load the .gguf; ",
           "other models: convert to GGUF or safetensors");
  return load_gguf_model(path, options);
}

}  // namespace ga
