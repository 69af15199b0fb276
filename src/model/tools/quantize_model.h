// Re-quantizing a GGUF model, like llama-quantize: every weight matrix is decoded to float32 and
// encoded in the type the file type's rules choose (quant_mix.h); other tensors and all metadata
// are copied; general.quantization_version = 2 and general.file_type are set.
//
// The input stays memory-mapped and the output is streamed through gguf::Writer's deferred tensors,
// so quantizing a 13 GB model needs about two tensors of memory beyond the mapping. The output
// follows llama-quantize's layout (tensors in its layer-sorted order, the two keys above re-appended
// at the end), so a --pure run on the same input gives a byte-identical file.
#pragma once

#include <cstdint>
#include <string>

#include "model/tools/quant_mix.h"

namespace ga::tools {

struct QuantizeOptions {
  std::string type;   // a file type name: "Q4_K_M", "q8_0", ... (file_type_from_name)
  bool pure = false;  // every matrix gets the default type (llama-quantize --pure)
  int n_threads = 0;  // 0: all hardware threads
};

struct QuantizeSummary {
  FileType ftype;
  uint64_t input_bytes = 0;   // tensor data bytes
  uint64_t output_bytes = 0;
  int n_tensors = 0;
  int n_converted = 0;        // tensors whose type changed
  int n_fallback = 0;         // tensors that needed a fallback type
  double seconds = 0.0;
};

// Throws InvalidArgument for an unknown type name, Io / InvalidFormat for a bad input, Unsupported
// for an input tensor type we cannot decode. Logs one line per fallback (Warn) and per tensor (Debug).
QuantizeSummary quantize_model(const std::string& input_path, const std::string& output_path,
                               const QuantizeOptions& options);

}  // namespace ga::tools
