// conv2d on NHWC tensors with KRSC filters, stride/padding/dilation/groups and the gemm epilogue.
//
// The dispatch: plan_conv2d checks the sizes and types and computes the output's extent once (whatever the
// device), then asks the device's implementation for its tiling and workspace; run_conv2d checks the pointers and
// runs it. The CPU's is ops/cpu/conv2d_cpu.cpp (an implicit GEMM); Device::Cuda is refused until its kernels exist.
#include <cstdint>

#include "ops/cpu/cpu_paths.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

namespace {

// Output positions along one axis: (in + 2 pad - dil (taps - 1) - 1) / stride + 1, or 0 when the window does not
// fit in the padded input.
int64_t out_extent(int64_t in, int64_t pad, int64_t dil, int64_t taps, int64_t stride) {
  const int64_t span = dil * (taps - 1) + 1;
  return in + 2 * pad < span ? 0 : (in + 2 * pad - span) / stride + 1;
}

}  // namespace

Status plan_conv2d(const Conv2dDesc& d, const Exec& exec, Conv2dPlan* plan) {
  return guarded([&] {
    GA_CHECK(plan != nullptr, InvalidArgument, "conv2d: plan is a null pointer");
    GA_CHECK(d.batch >= 0 && d.h >= 0 && d.w >= 0 && d.c >= 1 && d.k >= 1 && d.r >= 1 && d.s >= 1, InvalidArgument,
             "conv2d: sizes must be batch, h, w >= 0 and c, k, r, s >= 1 (got batch ", d.batch, ", h ", d.h, ", w ",
             d.w, ", c ", d.c, ", k ", d.k, ", r ", d.r, ", s ", d.s, ")");
    GA_CHECK(d.stride_h >= 1 && d.stride_w >= 1 && d.dil_h >= 1 && d.dil_w >= 1 && d.pad_h >= 0 && d.pad_w >= 0,
             InvalidArgument, "conv2d: stride and dilation must be >= 1 and padding >= 0");
    GA_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.k % d.groups == 0, InvalidArgument, "conv2d: groups ", d.groups,
             " must divide the input channels ", d.c, " and the output channels ", d.k);
    require_float_type(d.x_type, "conv2d", "x");
    require_float_type(d.filter_type, "conv2d", "filter");
    require_float_type(d.out_type, "conv2d", "out");
    if (d.has_bias) require_float_type(d.bias_type, "conv2d", "bias");
    require_cpu(exec.device, "conv2d");
    Conv2dPlan p;
    p.desc = d;
    p.device = exec.device;
    p.p = out_extent(d.h, d.pad_h, d.dil_h, d.r, d.stride_h);
    p.q = out_extent(d.w, d.pad_w, d.dil_w, d.s, d.stride_w);
    p.cpu = cpu_path::plan_conv2d(p, exec.pool);
    p.workspace_bytes = cpu_path::conv2d_workspace_bytes(p);
    *plan = p;
  });
}

Status run_conv2d(const Conv2dPlan& plan, const Conv2dArgs& args, void* workspace, const Exec& exec) {
  return guarded([&] {
    GA_CHECK(exec.device == plan.device, InvalidArgument, "conv2d: the plan was made for another device");
    require_cpu(exec.device, "conv2d");
    if (plan.desc.batch * plan.p * plan.q == 0) return;
    GA_CHECK(args.x != nullptr && args.filter != nullptr && args.out != nullptr, InvalidArgument,
             "conv2d: x, filter or out is a null pointer");
    GA_CHECK(!plan.desc.has_bias || args.bias != nullptr, InvalidArgument,
             "conv2d: the plan has a bias but args.bias is null");
    GA_CHECK(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, InvalidArgument,
             "conv2d: workspace must be a float-aligned buffer of plan.workspace_bytes (", plan.workspace_bytes,
             " bytes)");
    cpu_path::run_conv2d(plan, args, static_cast<float*>(workspace), exec.pool);
  });
}

}  // namespace ga::ops
