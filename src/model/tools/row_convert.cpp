// convert_rows: decode each row to float32, re-encode it (see row_convert.h).
#include "model/tools/row_convert.h"

#include <cstring>
#include <vector>

#include "backends/cpu/quant.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::tools {

void convert_rows(DType src_type, const uint8_t* src, DType dst_type, uint8_t* dst, int64_t rows, int64_t cols,
                  ThreadPool* pool) {
  const uint64_t src_row = row_bytes(src_type, static_cast<uint64_t>(cols));
  const uint64_t dst_row = row_bytes(dst_type, static_cast<uint64_t>(cols));
  if (src_type == dst_type) {
    std::memcpy(dst, src, src_row * static_cast<uint64_t>(rows));
    return;
  }
  GA_CHECK(traits(src_type).supported, Unsupported, "cannot convert tensors of type ", dtype_name(src_type));
  auto work = [&](int64_t begin, int64_t end, int) {
    std::vector<float> row(static_cast<size_t>(cols));  // [cols]
    for (int64_t r = begin; r < end; ++r) {
      cpu::dequantize_row(src_type, src + static_cast<uint64_t>(r) * src_row, row.data(), cols);
      cpu::quantize_row(dst_type, row.data(), dst + static_cast<uint64_t>(r) * dst_row, cols);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows, work);
  } else {
    work(0, rows, 0);
  }
}

}  // namespace ga::tools
