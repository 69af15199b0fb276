// Threaded conversion of a weight matrix between stored types: each row is decoded to float32 and
// re-encoded with the CPU backend's llama.cpp-identical quantizers.
//
// Rows are independent, so the matrix is split into one contiguous row range per thread and every
// thread keeps one float32 row of scratch: memory use does not grow with the matrix, and the result
// does not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/quant.h"
#include "core/thread_pool.h"
#include "gpu_accel/dtype.h"

namespace ga::tools {

// dst[rows][row_bytes(dst_type, cols)] = dst_type(src[rows][row_bytes(src_type, cols)]).
// The same type is a plain copy. Throws Unsupported for a type we cannot decode or encode.
void convert_rows(DType src_type, const uint8_t* src, DType dst_type, uint8_t* dst, int64_t rows, int64_t cols,
                  ThreadPool* pool);

// Fills rows with generated float32 values, then encodes them: make_row(row, out[cols]) is called
// for every row (from several threads at once; it must only depend on `row`).
// A template so the per-row generator inlines into the loop (a 7B model has ~1.3M rows).
template <typename MakeRow>
void generate_rows(DType dst_type, uint8_t* dst, int64_t rows, int64_t cols, ThreadPool* pool,
                   const MakeRow& make_row) {
  const uint64_t dst_row_bytes = row_bytes(dst_type, static_cast<uint64_t>(cols));
  auto work = [&](int64_t begin, int64_t end, int) {
    std::vector<float> scratch(dst_type == DType::F32 ? 0 : static_cast<size_t>(cols));  // [cols]
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* out = dst + static_cast<uint64_t>(r) * dst_row_bytes;
      if (dst_type == DType::F32) {
        make_row(r, reinterpret_cast<float*>(out));
      } else {
        make_row(r, scratch.data());
        cpu::quantize_row(dst_type, scratch.data(), out, cols);
      }
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows, work);
  } else {
    work(0, rows, 0);
  }
}

}  // namespace ga::tools
