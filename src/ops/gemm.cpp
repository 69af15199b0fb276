// gemm / batched gemm: C = act(alpha * op(A) op(B) + beta * C + bias), row-major, strided batches.
//
// plan_gemm checks the shapes and strides once and picks how the CPU runs it; run_gemm only executes. The CPU
// path is the backend's matmul (backends/cpu/quant.h: y[t][r] = W[r] . x[t], W in F32/F16/BF16 read in place,
// x float32, threads over W's rows, a register-blocked prefill kernel). A GEMM maps onto it two ways:
//   rows = n: W = op(B)^T [n][k] (B itself when trans_b), x = op(A) [m][k], y = C [m][n];
//   rows = m: W = op(A) [m][k] (A itself when !trans_a), x = op(B)^T [n][k], y = C^T [n][m].
// The plan takes the larger of m and n as the rows, so every thread has work for skinny products too. An
// operand whose storage does not run along k (or an x that is not float32) is first packed into float32 rows in
// the workspace; so is the float32 accumulator y, which the epilogue (alpha, beta C, bias, activation, rounding
// to C's type) reads, so beta C never sees a partial sum.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/quant.h"
#include "ops/ops_common.h"

namespace ga::ops {

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
  parallel_rows(
      pool, rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          for (int64_t j = 0; j < k; ++j) dst[i * k + j] = load(src.type, src.data, i * src.row_step + j * src.col_step);
        }
      },
      kPackGrain);
}

const char* byte_offset(const void* p, DType t, int64_t elements) {
  return static_cast<const char*>(p) + static_cast<int64_t>(element_bytes(t)) * elements;
}

void run_cpu(const GemmPlan& plan, const GemmArgs& args, float* ws, ThreadPool* pool) {
  const GemmDesc& d = plan.desc;
  // op(A) as [m][k] and op(B)^T as [n][k]: the element steps along their rows and along k.
  const int64_t a_row = d.trans_a ? 1 : d.lda, a_k = d.trans_a ? d.lda : 1;
  const int64_t b_row = d.trans_b ? d.ldb : 1, b_k = d.trans_b ? 1 : d.ldb;
  const int64_t w_rows = plan.rows_are_m ? d.m : d.n, x_rows = plan.rows_are_m ? d.n : d.m;
  float* w_pack = ws;
  float* x_pack = w_pack + (plan.pack_w ? w_rows * d.k : 0);
  float* y = x_pack + (plan.pack_x ? x_rows * d.k : 0);  // [x_rows][w_rows]
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    const Operand a{d.a_type, byte_offset(args.a, d.a_type, bi * d.stride_a), a_row, a_k};
    const Operand bt{d.b_type, byte_offset(args.b, d.b_type, bi * d.stride_b), b_row, b_k};
    const Operand& w_op = plan.rows_are_m ? a : bt;
    const Operand& x_op = plan.rows_are_m ? bt : a;
    if (d.k == 0) {
      std::memset(y, 0, static_cast<size_t>(d.m * d.n) * sizeof(float));
    } else {
      cpu::MatrixRef w;
      w.rows = w_rows;
      w.cols = d.k;
      if (plan.pack_w) {
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
      if (plan.pack_x) {
        pack(x_op, x_rows, d.k, x_pack, pool);
        x = x_pack;
        ldx = d.k;
      }
      cpu::matmul(w, x, x_rows, ldx, y, w_rows, pool);
    }
    void* c = const_cast<char*>(byte_offset(args.c, d.c_type, bi * d.stride_c));
    parallel_rows(
        pool, d.m,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t i = begin; i < end; ++i) {
            for (int64_t j = 0; j < d.n; ++j) {
              const float acc = plan.rows_are_m ? y[j * d.m + i] : y[i * d.n + j];
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

}  // namespace

Status plan_gemm(const GemmDesc& d, const Exec& exec, GemmPlan* plan) {
  return guarded([&] {
    GA_CHECK(plan != nullptr, InvalidArgument, "gemm: plan is a null pointer");
    require_cpu(exec.device, "gemm");
    GA_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0 && d.batch >= 1, InvalidArgument, "gemm: m ", d.m, ", n ", d.n,
             ", k ", d.k, " must be >= 0 and batch ", d.batch, " >= 1");
    require_float_type(d.a_type, "gemm", "A");
    require_float_type(d.b_type, "gemm", "B");
    require_float_type(d.c_type, "gemm", "C");
    if (d.has_bias) require_float_type(d.bias_type, "gemm", "bias");
    // The stored matrices' row lengths bound their leading dimensions (as BLAS's lda >= max(1, cols)).
    const int64_t a_cols = d.trans_a ? d.m : d.k, b_cols = d.trans_b ? d.k : d.n;
    GA_CHECK(d.lda >= std::max<int64_t>(1, a_cols), InvalidArgument, "gemm: lda ", d.lda, " is below A's row of ",
             a_cols, " elements (", d.trans_a ? "trans_a: A is [k][m]" : "A is [m][k]", ")");
    GA_CHECK(d.ldb >= std::max<int64_t>(1, b_cols), InvalidArgument, "gemm: ldb ", d.ldb, " is below B's row of ",
             b_cols, " elements (", d.trans_b ? "trans_b: B is [n][k]" : "B is [k][n]", ")");
    GA_CHECK(d.ldc >= std::max<int64_t>(1, d.n), InvalidArgument, "gemm: ldc ", d.ldc, " is below C's row of ", d.n,
             " elements");
    GA_CHECK(d.stride_a >= 0 && d.stride_b >= 0 && d.stride_c >= 0, InvalidArgument,
             "gemm: batch strides must be >= 0 (0 repeats a matrix)");
    GA_CHECK(d.batch == 1 || d.stride_c > 0 || d.m * d.n == 0, InvalidArgument,
             "gemm: stride_c 0 would write every batch into one C");
    GemmPlan p;
    p.desc = d;
    p.device = exec.device;
    p.rows_are_m = d.m > d.n;
    p.pack_w = p.rows_are_m ? d.trans_a : !d.trans_b;
    p.pack_x = p.rows_are_m ? !(d.trans_b && d.b_type == DType::F32) : (d.trans_a || d.a_type != DType::F32);
    const int64_t w_rows = p.rows_are_m ? d.m : d.n, x_rows = p.rows_are_m ? d.n : d.m;
    const int64_t floats = (p.pack_w ? w_rows * d.k : 0) + (p.pack_x ? x_rows * d.k : 0) + d.m * d.n;
    p.workspace_bytes = static_cast<size_t>(floats) * sizeof(float);
    *plan = p;
  });
}

Status run_gemm(const GemmPlan& plan, const GemmArgs& args, void* workspace, const Exec& exec) {
  return guarded([&] {
    require_cpu(exec.device, "gemm");
    GA_CHECK(exec.device == plan.device, InvalidArgument, "gemm: the plan was made for another device");
    const GemmDesc& d = plan.desc;
    if (d.m == 0 || d.n == 0) return;
    GA_CHECK(args.c != nullptr, InvalidArgument, "gemm: C is a null pointer");
    GA_CHECK(d.k == 0 || (args.a != nullptr && args.b != nullptr), InvalidArgument, "gemm: A or B is a null pointer");
    GA_CHECK(!d.has_bias || args.bias != nullptr, InvalidArgument, "gemm: the plan has a bias but args.bias is null");
    GA_CHECK(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, InvalidArgument,
             "gemm: workspace must be a float-aligned buffer of plan.workspace_bytes (", plan.workspace_bytes,
             " bytes)");
    run_cpu(plan, args, static_cast<float*>(workspace), exec.pool);
  });
}

}  // namespace ga::ops
