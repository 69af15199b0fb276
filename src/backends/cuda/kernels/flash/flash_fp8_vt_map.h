// Where the in-kernel FP8 V transpose (transpose_v_tile, flash_fp8_vt.cuh) reads and writes: plain integer functions
// for host and device, so that a CPU test (tests/cuda/test_flash_fp8_vt_map.cpp) checks them where CI has no GPU, by
// replaying ldmatrix.trans / byte permutes / stmatrix on bytes: every V^T byte the consumers read is written once with
// the right key (fp8_key_of_column's order), and each 8-row matrix of a load or a store hits 8 different 16-byte bank
// groups.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GA_VT_MAP_HD __host__ __device__
#else
#define GA_VT_MAP_HD
#endif

namespace ga::cuda::flash_detail {

// A lane's part of one transpose step (a 16-key group g x head-dim bytes 32c..32c+31 of a 128-byte panel). The lane
// gives ldmatrix the address of row r = lane % 8 of matrix m = lane / 8 (key 8 (m % 2) + r of the group, 16-byte
// chunk 2c + m / 2 of the panel) and stmatrix the address of head-dim row 32c + st_d of the panel; sel_a / sel_b are
// its byte-permute selectors (even rows into matrices 0 / 2 when lane / 4 < 4, odd rows otherwise: see
// transpose_v_tile).
struct VtLaneMap {
  uint32_t ld_row;  // (8 (m % 2) + r) * 128: the key's row within the group, in bytes
  int ld_chunk;     // m / 2
  int ld_xor;       // r = key % 8, the swizzle of that row
  int st_d;         // 16 (m / 2) + 2 r + odd (odd = m % 2 xor r >= 4)
  uint32_t sel_a, sel_b;
};

GA_VT_MAP_HD constexpr VtLaneMap vt_lane_map(int lane) {
  const int m = lane / 8, r = lane % 8;
  const int odd = (m & 1) ^ (r >= 4 ? 1 : 0);
  const uint32_t sel_a = lane / 4 < 4 ? 0x6420u : 0x7531u;
  return {static_cast<uint32_t>((8 * (m & 1) + r) * 128), m / 2, r, 16 * (m / 2) + 2 * r + odd, sel_a,
          sel_a ^ 0x1111u};
}

// The lane's ldmatrix address for column c of `panel`, relative to the staged V tile, before the group's offset
// (+ g * 2048: 16 keys of 128 bytes).
GA_VT_MAP_HD constexpr uint32_t vt_load_base(const VtLaneMap& l, int panel, int c, int block_n) {
  return l.ld_row + static_cast<uint32_t>(panel * (block_n * 128) + (((2 * c + l.ld_chunk) ^ l.ld_xor) << 4));
}
GA_VT_MAP_HD constexpr uint32_t vt_load_offset(uint32_t load_base, int g) {
  return load_base + static_cast<uint32_t>(g * 16 * 128);
}

// The lane's stmatrix address for column c of `panel` relative to the V^T slot (1024-byte aligned, so the row's
// 128-byte base has clear low bits and the chunk can be or-ed in), before the group's swizzle and V^T block.
GA_VT_MAP_HD constexpr uint32_t vt_store_base(uint32_t vt_slot, const VtLaneMap& l, int panel, int c) {
  const int d = 128 * panel + 32 * c + l.st_d;
  return (vt_slot + static_cast<uint32_t>(d * 128)) | static_cast<uint32_t>((l.st_d & 7) << 4);
}
// Group g's chunk g % 8 swizzled by the row (the xor: row % 8 = st_d % 8 is in the base already) and its 128-key V^T
// block (g / 8) of head_dim rows.
GA_VT_MAP_HD constexpr uint32_t vt_store_offset(uint32_t store_base, int g, int head_dim) {
  return (store_base ^ static_cast<uint32_t>((g & 7) << 4)) + static_cast<uint32_t>((g / 8) * (head_dim * 128));
}

}  // namespace ga::cuda::flash_detail
