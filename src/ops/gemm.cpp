// gemm / batched gemm: C = act(alpha * op(A) op(B) + beta * C + bias), row-major, strided batches.
//
// The dispatch: plan_gemm checks shapes, leading dimensions, strides and types once (whatever the device), then
// asks the device's implementation for its path and workspace; run_gemm checks the pointers and runs that path.
// The CPU's is ops/cpu/gemm_cpu.cpp; Device::Cuda is refused until its kernels exist.
#include <algorithm>
#include <cstdint>

#include "ops/cpu/cpu_paths.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

Status plan_gemm(const GemmDesc& d, const Exec& exec, GemmPlan* plan) {
  return guarded([&] {
    GA_CHECK(plan != nullptr, InvalidArgument, "gemm: plan is a null pointer");
    GA_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0 && d.batch >= 1, InvalidArgument, "gemm: m ", d.m, ", n ", d.n, ", k ",
             d.k, " must be >= 0 and batch ", d.batch, " >= 1");
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
    require_cpu(exec.device, "gemm");
    GemmPlan p;
    p.desc = d;
    p.device = exec.device;
    p.cpu = cpu_path::plan_gemm(d);
    p.workspace_bytes = cpu_path::gemm_workspace_bytes(d, p.cpu);
    *plan = p;
  });
}

Status run_gemm(const GemmPlan& plan, const GemmArgs& args, void* workspace, const Exec& exec) {
  return guarded([&] {
    GA_CHECK(exec.device == plan.device, InvalidArgument, "gemm: the plan was made for another device");
    require_cpu(exec.device, "gemm");
    const GemmDesc& d = plan.desc;
    if (d.m == 0 || d.n == 0) return;
    GA_CHECK(args.c != nullptr, InvalidArgument, "gemm: C is a null pointer");
    GA_CHECK(d.k == 0 || (args.a != nullptr && args.b != nullptr), InvalidArgument, "gemm: A or B is a null pointer");
    GA_CHECK(!d.has_bias || args.bias != nullptr, InvalidArgument, "gemm: the plan has a bias but args.bias is null");
    GA_CHECK(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, InvalidArgument,
             "gemm: workspace must be a float-aligned buffer of plan.workspace_bytes (", plan.workspace_bytes,
             " bytes)");
    cpu_path::run_gemm(plan, args, static_cast<float*>(workspace), exec.pool);
  });
}

}  // namespace ga::ops
