// The in-kernel FP8 V transpose's addresses (kernels/flash/flash_fp8_vt_map.h, used by transpose_v_tile), checked on
// the host: it runs in CI, which has no GPU, while test_cuda_flash_attention's Fp8* tests check the kernels that use it
// (variants 57 / 58, benchmark builds) on a GPU. The test replays the warp steps of transpose_v_tile on bytes, with
// ldmatrix.x4.trans, __byte_perm and stmatrix.x4 as PTX defines them, and requires:
//   - every V^T byte the consumers read holds the right byte of V: row d, column 16 g + l = key 16 g +
//     fp8_key_of_column(l) (the consumers' P register layout; its formula is restated here, from the consumer's
//     accumulator layout, rather than taken from the kernel headers);
//   - no V^T chunk is written twice, nothing is written outside the V^T tile, nothing read outside the staged V tile;
//   - each 8-row matrix of every load and store hits 8 different 16-byte bank groups (no shared-memory bank
//     conflicts), and every row address is 16-byte aligned.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "backends/cuda/kernels/flash/flash_fp8_vt_map.h"

namespace {

using ::ga::cuda::flash_detail::vt_lane_map;
using ::ga::cuda::flash_detail::vt_load_base;
using ::ga::cuda::flash_detail::vt_load_offset;
using ::ga::cuda::flash_detail::vt_store_base;
using ::ga::cuda::flash_detail::vt_store_offset;
using ::ga::cuda::flash_detail::VtLaneMap;

constexpr int kTransposeWarps = 2;  // kVtTransposeWarps (flash_fp8_vt.cuh)

// V^T column l of a 16-key group holds this key: thread c of a quad packs its S accumulators (keys 2c, 2c+1, 8+2c,
// 9+2c of each 16) as the 8-bit A fragment's k = 4c..4c+3.
int key_of_column(int l) { return 2 * (l / 4) + (l % 2) + 8 * ((l % 4) / 2); }

uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {  // CUDA's __byte_perm
  const uint64_t v = (uint64_t{y} << 32) | x;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return out;
}

// The byte offset of (key, d) in the staged V tile: K's TMA layout, 128-byte head-dim panels, 128-byte swizzle.
size_t raw_offset(int key, int d, int block_n) {
  return size_t(d / 128) * block_n * 128 + size_t(key) * 128 + size_t(((d % 128) / 16) ^ (key % 8)) * 16 + d % 16;
}
// The byte offset of (d, column) in the V^T tile the consumers read: 128-key blocks of head_dim rows, 128-byte swizzle.
size_t vt_offset(int d, int col, int head_dim) {
  return size_t(col / 128) * head_dim * 128 + size_t(d) * 128 + size_t(((col % 128) / 16) ^ (d % 8)) * 16 + col % 16;
}

void expect_8_bank_groups(const std::array<uint32_t, 32>& addr, int matrix, const char* what) {
  std::set<uint32_t> groups;
  for (int r = 0; r < 8; ++r) {
    ASSERT_EQ(addr[8 * matrix + r] % 16, 0u) << what << " row address not 16-byte aligned";
    groups.insert((addr[8 * matrix + r] / 16) % 8);
  }
  EXPECT_EQ(groups.size(), 8u) << what << " matrix " << matrix << ": a bank conflict";
}

void check_transpose(int head_dim, int block_n, uint32_t vt_slot) {
  SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", " + std::to_string(block_n) + " keys, V^T slot at " +
               std::to_string(vt_slot));
  std::mt19937 rng(head_dim * 1000 + block_n);
  std::vector<std::vector<uint8_t>> v(block_n, std::vector<uint8_t>(head_dim));
  std::vector<uint8_t> raw(size_t(block_n) * head_dim);
  for (int k = 0; k < block_n; ++k)
    for (int d = 0; d < head_dim; ++d) raw[raw_offset(k, d, block_n)] = v[k][d] = static_cast<uint8_t>(rng());
  const int vt_blocks = (block_n + 127) / 128;
  const size_t vt_bytes = size_t(vt_blocks) * head_dim * 128;
  std::vector<int> vt(vt_bytes, -1);  // -1: never written
  std::set<uint32_t> chunks_written;

  const int panels = head_dim / 128, groups = block_n / 16;
  for (int warp = 0; warp < kTransposeWarps; ++warp)
    for (int panel = 0; panel < panels; ++panel)
      for (int ci = 0; ci < 2; ++ci)
        for (int g = 0; g < groups; ++g) {
          const int c = 2 * warp + ci;
          std::array<uint32_t, 32> ld{}, st{};
          std::array<VtLaneMap, 32> map{};
          for (int lane = 0; lane < 32; ++lane) {
            map[lane] = vt_lane_map(lane);
            ld[lane] = vt_load_offset(vt_load_base(map[lane], panel, c, block_n), g);
            st[lane] = vt_store_offset(vt_store_base(vt_slot, map[lane], panel, c), g, head_dim) - vt_slot;
          }
          for (int m = 0; m < 4; ++m) {
            expect_8_bank_groups(ld, m, "ldmatrix");
            expect_8_bank_groups(st, m, "stmatrix");
          }
          // ldmatrix.x4.trans: thread t, matrix m: b16 element t / 4 of rows 2 (t % 4) and 2 (t % 4) + 1.
          std::array<std::array<uint32_t, 4>, 32> w{};
          for (int t = 0; t < 32; ++t) {
            std::array<uint32_t, 4> reg{};
            for (int m = 0; m < 4; ++m) {
              uint32_t x = 0;
              for (int half = 0; half < 2; ++half) {
                const uint32_t row = ld[8 * m + 2 * (t % 4) + half];
                ASSERT_LE(row + 16, raw.size()) << "ldmatrix reads past the staged V tile";
                for (int b = 0; b < 2; ++b) x |= uint32_t{raw[row + 2 * (t / 4) + b]} << (8 * (2 * half + b));
              }
              reg[m] = x;
            }
            const VtLaneMap& l = map[t];
            w[t] = {byte_perm(reg[0], reg[1], l.sel_a), byte_perm(reg[0], reg[1], l.sel_b),
                    byte_perm(reg[2], reg[3], l.sel_a), byte_perm(reg[2], reg[3], l.sel_b)};
          }
          // stmatrix.x4: row r of matrix m = the words of threads 4r .. 4r + 3.
          for (int m = 0; m < 4; ++m)
            for (int r = 0; r < 8; ++r) {
              const uint32_t row = st[8 * m + r];
              ASSERT_LE(row + 16, vt_bytes) << "stmatrix writes past the V^T tile";
              EXPECT_TRUE(chunks_written.insert(row).second) << "V^T chunk at " << row << " written twice";
              for (int j = 0; j < 4; ++j)
                for (int b = 0; b < 4; ++b) vt[row + 4 * j + b] = (w[4 * r + j][m] >> (8 * b)) & 0xff;
            }
        }

  int wrong = 0;
  for (int d = 0; d < head_dim; ++d)
    for (int col = 0; col < block_n; ++col) {
      const int key = 16 * (col / 16) + key_of_column(col % 16);
      if (vt[vt_offset(d, col, head_dim)] != v[key][d] && ++wrong <= 5) {
        ADD_FAILURE() << "V^T row " << d << " column " << col << ": " << vt[vt_offset(d, col, head_dim)]
                      << ", want key " << key << "'s byte " << int(v[key][d]);
      }
    }
  EXPECT_EQ(wrong, 0);
  // Exactly the columns the consumers read (the 224-key tile's second block leaves its last 32 columns alone).
  EXPECT_EQ(chunks_written.size(), size_t(head_dim) * groups);
}

TEST(FlashFp8VtMap, EveryConsumedByteOnceWithoutBankConflicts) {
  for (const uint32_t slot : {0u, 3u * 32768u}) {  // the slot base: any multiple of 1024 (the kernel's ring slots)
    check_transpose(256, 128, slot);  // variant 57
    check_transpose(128, 224, slot);  // variant 58 (FA3's 224-key FP8 tile)
    check_transpose(128, 128, slot);
  }
}

}  // namespace
