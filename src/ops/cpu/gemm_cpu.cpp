// gemm on the CPU backend's matmul (backends/cpu/quant.h: y[t][r] = W[r] . x[t], W in F32/F16/BF16 read in
// place, x float32, threads over W's rows, a register-blocked prefill kernel). A GEMM maps onto it two ways:
//   rows = n: W = op(B)^T [n][k] (B itself when trans_b), x = op(A) [m][k], y = C [m][n];
//   rows = m: W = op(A) [m][k] (A itself when !trans_a), x = op(B)^T [n][k], y = C^T [n][m].
// The plan takes the larger of m and n as the rows, so every thread has work for skinny products too. An
// operand whose storage does not run along k (or an x that is not float32) is first packed into float32 rows in
// the workspace; so is the float32 accumulator y, which the epilogue (alpha, beta C, bias, activation, rounding
// to C's type) reads, so beta C never sees a partial sum.
#include <cstdint>
#include <cstring>

#include "backends/cpu/quant.h"
#include "ops/cpu/cpu_paths.h"
#include "ops/ops_common.h"

namespace ga::ops::cpu_path {

using namespace detail;

namespace {

constexpr int64_t kPackGrain = 8;
constexpr int64_t kEpilogueGrain = 8;

// One stored operand: element (i, j) of op(M) at data[i * row_step + j * col_step] (elements).
struct Operand {
  DType type;
  const void* data;
  int64_t row_step;
  int64_t col_step;
};

// rows x k float32 rows (ld k) from an operand view, threaded.
void pack(const Operand& src, int64_t rows, int64_t k, float* dst, ThreadPool* pool) {
  parallel_for(
      pool, rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          for (int64_t j = 0; j < k; ++j)
            dst[i * k + j] = load(src.type, src.data, i * src.row_step + j * src.col_step);
        }
      },
      kPackGrain);
}

const char* byte_offset(const void* p, DType t, int64_t elements) {
  return static_cast<const char*>(p) + static_cast<int64_t>(element_bytes(t)) * elements;
}

}  // namespace

CpuGemmPath plan_gemm(const GemmDesc& d) {
  CpuGemmPath path;
  path.rows_are_m = d.m > d.n;
  path.pack_w = path.rows_are_m ? d.trans_a : !d.trans_b;
  path.pack_x = path.rows_are_m ? !(d.trans_b && d.b_type == DType::F32) : (d.trans_a || d.a_type != DType::F32);
  return path;
}

size_t gemm_workspace_bytes(const GemmDesc& d, const CpuGemmPath& path) {
  const int64_t w_rows = path.rows_are_m ? d.m : d.n, x_rows = path.rows_are_m ? d.n : d.m;
  const int64_t floats = (path.pack_w ? w_rows * d.k : 0) + (path.pack_x ? x_rows * d.k : 0) + d.m * d.n;
  return static_cast<size_t>(floats) * sizeof(float);
}

void run_gemm(const GemmPlan& plan, const GemmArgs& args, float* ws, ThreadPool* pool) {
  const GemmDesc& d = plan.desc;
  const CpuGemmPath& path = plan.cpu;
  // op(A) as [m][k] and op(B)^T as [n][k]: the element steps along their rows and along k.
  const int64_t a_row = d.trans_a ? 1 : d.lda, a_k = d.trans_a ? d.lda : 1;
  const int64_t b_row = d.trans_b ? d.ldb : 1, b_k = d.trans_b ? 1 : d.ldb;
  const int64_t w_rows = path.rows_are_m ? d.m : d.n, x_rows = path.rows_are_m ? d.n : d.m;
  float* w_pack = ws;
  float* x_pack = w_pack + (path.pack_w ? w_rows * d.k : 0);
  float* y = x_pack + (path.pack_x ? x_rows * d.k : 0);  // [x_rows][w_rows]
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    const Operand a{d.a_type, byte_offset(args.a, d.a_type, bi * d.stride_a), a_row, a_k};
    const Operand bt{d.b_type, byte_offset(args.b, d.b_type, bi * d.stride_b), b_row, b_k};
    const Operand& w_op = path.rows_are_m ? a : bt;
    const Operand& x_op = path.rows_are_m ? bt : a;
    if (d.k == 0) {
      std::memset(y, 0, static_cast<size_t>(d.m * d.n) * sizeof(float));
    } else {
      cpu::MatrixRef w;
      w.rows = w_rows;
      w.cols = d.k;
      if (path.pack_w) {
        pack(w_op, w_rows, d.k, w_pack, pool);
        w.type = DType::F32;
        w.data = reinterpret_cast<const uint8_t*>(w_pack);
        w.row_stride = static_cast<uint64_t>(d.k) * sizeof(float);
      } else {
        w.type = w_op.type;
        w.data = static_cast<const uint8_t*>(w_op.data);
        w.row_stride = static_cast<uint64_t>(w_op.row_step) * element_bytes(w_op.type);
      }
      const float* x = static_cast<const float*>(x_op.data);
      int64_t ldx = x_op.row_step;
      if (path.pack_x) {
        pack(x_op, x_rows, d.k, x_pack, pool);
        x = x_pack;
        ldx = d.k;
      }
      cpu::matmul(w, x, x_rows, ldx, y, w_rows, pool);
    }
    void* c = const_cast<char*>(byte_offset(args.c, d.c_type, bi * d.stride_c));
    parallel_for(
        pool, d.m,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t i = begin; i < end; ++i) {
            for (int64_t j = 0; j < d.n; ++j) {
              const float acc = path.rows_are_m ? y[j * d.m + i] : y[i * d.n + j];
              float v = args.alpha * acc;
              if (args.beta != 0.0f) v += args.beta * load(d.c_type, c, i * d.ldc + j);
              if (d.has_bias) v += load(d.bias_type, args.bias, j);
              store(d.c_type, c, i * d.ldc + j, activate(d.activation, v));
            }
          }
        },
        kEpilogueGrain);
  }
}

}  // namespace ga::ops::cpu_path
