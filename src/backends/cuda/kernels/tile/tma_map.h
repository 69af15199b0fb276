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

// The attention kernels' Q/K/V/dO maps: a [batch][heads][seqlen][head_dim] view over a tensor with element
// strides (BSHD and BHSD both work), boxes of {one 128-byte swizzle row, box_rows, 1, 1}. elem_bytes 2: bf16 or
// fp16 (is_bf16); 1: e4m3 as bytes. A stride of an extent-1 dimension is never stepped, but TMA still wants a
// valid multiple of 16 bytes, so it gets 16.
const char* encode_tma_map_bshd(CUtensorMap* map, int elem_bytes, bool is_bf16, const void* base, int head_dim,
                                int seqlen, int heads, int batch, int64_t seq_stride, int64_t head_stride,
                                int64_t batch_stride, int box_rows);

}  // namespace ga::cuda::tile
