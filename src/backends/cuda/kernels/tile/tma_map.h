// Host side of TMA: builds a CUtensorMap (the descriptor the copy engine reads) for a 4-D tensor of
// 16-bit (bf16/fp16) or 8-bit (FP8, as raw bytes) elements
// with a 128-byte swizzle, through the driver's cuTensorMapEncodeTiled.
//
// The driver function is reached through cudaGetDriverEntryPointByVersion, so nothing links libcuda
// (the CUDA runtime already loads the driver); the entry point is looked up once per process.
// Encoding is pure host work (~1 us), so launchers encode per call and pass maps by value as
// __grid_constant__ kernel parameters: no device allocation, nothing cached across pointer changes.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ga::cuda::tile {

// dims innermost first (elements); strides_bytes[i] is the step of dims[i + 1]; box innermost first.
// Returns nullptr on success, else why the map cannot be built (alignment, driver missing, ...).
const char* encode_tma_map_16bit_sw128(CUtensorMap* map, bool is_bf16, const void* base, const uint64_t dims[4],
                                       const uint64_t strides_bytes[3], const uint32_t box[4]);
// Same for 8-bit elements (e4m3 FP8, moved as bytes: TMA does not convert): box[0] <= 128 (one swizzle row).
const char* encode_tma_map_8bit_sw128(CUtensorMap* map, const void* base, const uint64_t dims[4],
                                      const uint64_t strides_bytes[3], const uint32_t box[4]);

}  // namespace ga::cuda::tile
