// The families registry.cpp lists, one function per family file.
#pragma once

#include <vector>

#include "model/arch/architecture.h"

namespace ga::arch {

std::vector<ArchInfo> llama_family();  // llama (Llama 1/2/3, Mistral, Mixtral), qwen2   (llama.cpp)
std::vector<ArchInfo> qwen_family();   // qwen3, qwen2moe, qwen3moe                      (qwen.cpp)
std::vector<ArchInfo> gemma_family();  // gemma2, gemma3                                 (gemma.cpp)
std::vector<ArchInfo> rwkv_family();  // rwkv4, rwkv5.1, rwkv5.2, rwkv6, rwkv7 (rwkv.cpp files)   (rwkv.cpp)
std::vector<ArchInfo> phi3_family();   // phi3 (Phi-3, Phi-3.5, Phi-4 mini)              (phi3.cpp)

// What every decoder family shares in its ArchInfo: the decoder's tensor specs, config check and factory.
ArchInfo decoder_arch(std::string_view name);

}  // namespace ga::arch
