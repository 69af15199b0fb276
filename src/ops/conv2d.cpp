// conv2d on NHWC tensors as an implicit GEMM: out[pixel][o] = sum over (r, s, c) of patch[pixel][(r, s, c)] *
// filter[o][(r, s, c)], per group.
//
// The GEMM's A matrix (im2col) is never built whole: the CPU gathers the patches of tile_pixels output pixels
// into float32 rows (zeros where the window hangs over the padding), multiplies them with the group's filter
// rows through the backend's matmul (the filter, KRSC, is exactly matmul's W: one row of r*s*c/groups elements
// per output channel, read in its stored type), then applies the epilogue (bias, activation, rounding) to the
// tile. Tiles are split over the pool, one workspace slice per thread, so matmul itself runs single-threaded.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/quant.h"
#include "ops/ops_common.h"

namespace ga::ops {

using namespace detail;

namespace {

constexpr int64_t kTilePixels = 32;  // output pixels per tile: matmul's 2-token kernel has 16 pairs to run

int64_t out_extent(int64_t in, int64_t pad, int64_t dil, int64_t taps, int64_t stride) {
  const int64_t span = dil * (taps - 1) + 1;
  return in + 2 * pad < span ? 0 : (in + 2 * pad - span) / stride + 1;
}

struct Geometry {
  int64_t cg, kg, patch;  // input channels per group, output channels per group, r * s * cg
  size_t tile_floats;     // one thread's slice: patches [tile][patch] + accumulators [tile][k]
};

Geometry geometry_of(const Conv2dPlan& plan) {
  const Conv2dDesc& d = plan.desc;
  Geometry g;
  g.cg = d.c / d.groups;
  g.kg = d.k / d.groups;
  g.patch = d.r * d.s * g.cg;
  g.tile_floats = static_cast<size_t>(plan.tile_pixels * (g.patch + d.k));
  return g;
}

void run_tile(const Conv2dPlan& plan, const Geometry& geo, const Conv2dArgs& args, int64_t first, int64_t count,
              float* slice) {
  const Conv2dDesc& d = plan.desc;
  float* patches = slice;                             // [count][patch]
  float* acc = slice + plan.tile_pixels * geo.patch;  // [count][k]
  const size_t fbytes = element_bytes(d.filter_type);
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t t = 0; t < count; ++t) {
      const int64_t pix = first + t;
      const int64_t nb = pix / (plan.p * plan.q), oy = pix / plan.q % plan.p, ox = pix % plan.q;
      float* row = patches + t * geo.patch;
      for (int64_t rr = 0; rr < d.r; ++rr) {
        const int64_t iy = oy * d.stride_h - d.pad_h + rr * d.dil_h;
        for (int64_t ss = 0; ss < d.s; ++ss) {
          const int64_t ix = ox * d.stride_w - d.pad_w + ss * d.dil_w;
          float* dst = row + (rr * d.s + ss) * geo.cg;
          if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) {
            std::fill(dst, dst + geo.cg, 0.0f);
            continue;
          }
          const int64_t src = ((nb * d.h + iy) * d.w + ix) * d.c + g * geo.cg;
          for (int64_t ci = 0; ci < geo.cg; ++ci) dst[ci] = load(d.x_type, args.x, src + ci);
        }
      }
    }
    cpu::MatrixRef w;
    w.type = d.filter_type;
    w.data = static_cast<const uint8_t*>(args.filter) + static_cast<size_t>(g * geo.kg * geo.patch) * fbytes;
    w.rows = geo.kg;
    w.cols = geo.patch;
    w.row_stride = static_cast<uint64_t>(geo.patch) * fbytes;
    cpu::matmul(w, patches, count, geo.patch, acc + g * geo.kg, d.k, nullptr);
  }
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t o = 0; o < d.k; ++o) {
      float v = acc[t * d.k + o];
      if (d.has_bias) v += load(d.bias_type, args.bias, o);
      store(d.out_type, args.out, (first + t) * d.k + o, activate(d.activation, v));
    }
  }
}

}  // namespace

Status plan_conv2d(const Conv2dDesc& d, const Exec& exec, Conv2dPlan* plan) {
  return guarded([&] {
    GA_CHECK(plan != nullptr, InvalidArgument, "conv2d: plan is a null pointer");
    require_cpu(exec.device, "conv2d");
    GA_CHECK(d.batch >= 0 && d.h >= 0 && d.w >= 0 && d.c >= 1 && d.k >= 1 && d.r >= 1 && d.s >= 1, InvalidArgument,
             "conv2d: sizes must be batch, h, w >= 0 and c, k, r, s >= 1 (got batch ", d.batch, ", h ", d.h, ", w ",
             d.w, ", c ", d.c, ", k ", d.k, ", r ", d.r, ", s ", d.s, ")");
    GA_CHECK(d.stride_h >= 1 && d.stride_w >= 1 && d.dil_h >= 1 && d.dil_w >= 1 && d.pad_h >= 0 && d.pad_w >= 0,
             InvalidArgument, "conv2d: stride and dilation must be >= 1 and padding >= 0");
    GA_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.k % d.groups == 0, InvalidArgument, "conv2d: groups ",
             d.groups, " must divide the input channels ", d.c, " and the output channels ", d.k);
    require_float_type(d.x_type, "conv2d", "x");
    require_float_type(d.filter_type, "conv2d", "filter");
    require_float_type(d.out_type, "conv2d", "out");
    if (d.has_bias) require_float_type(d.bias_type, "conv2d", "bias");
    Conv2dPlan p;
    p.desc = d;
    p.device = exec.device;
    p.p = out_extent(d.h, d.pad_h, d.dil_h, d.r, d.stride_h);
    p.q = out_extent(d.w, d.pad_w, d.dil_w, d.s, d.stride_w);
    p.tile_pixels = std::max<int64_t>(1, std::min(kTilePixels, d.batch * p.p * p.q));
    p.threads = pool_threads(exec.pool);
    p.workspace_bytes = geometry_of(p).tile_floats * static_cast<size_t>(p.threads) * sizeof(float);
    *plan = p;
  });
}

Status run_conv2d(const Conv2dPlan& plan, const Conv2dArgs& args, void* workspace, const Exec& exec) {
  return guarded([&] {
    require_cpu(exec.device, "conv2d");
    GA_CHECK(exec.device == plan.device, InvalidArgument, "conv2d: the plan was made for another device");
    GA_CHECK(pool_threads(exec.pool) <= plan.threads, InvalidArgument, "conv2d: the plan has workspace for ",
             plan.threads, " threads, the pool has ", pool_threads(exec.pool), " (plan with the same Exec)");
    const int64_t pixels = plan.desc.batch * plan.p * plan.q;
    if (pixels == 0) return;
    GA_CHECK(args.x != nullptr && args.filter != nullptr && args.out != nullptr, InvalidArgument,
             "conv2d: x, filter or out is a null pointer");
    GA_CHECK(!plan.desc.has_bias || args.bias != nullptr, InvalidArgument,
             "conv2d: the plan has a bias but args.bias is null");
    GA_CHECK(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, InvalidArgument,
             "conv2d: workspace must be a float-aligned buffer of plan.workspace_bytes (", plan.workspace_bytes,
             " bytes)");
    const Geometry geo = geometry_of(plan);
    const int64_t tiles = (pixels + plan.tile_pixels - 1) / plan.tile_pixels;
    float* ws = static_cast<float*>(workspace);
    parallel_rows(exec.pool, tiles, [&](int64_t begin, int64_t end, int thread) {
      float* slice = ws + static_cast<size_t>(thread) * geo.tile_floats;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t first = t * plan.tile_pixels;
        run_tile(plan, geo, args, first, std::min(plan.tile_pixels, pixels - first), slice);
      }
    });
  });
}

}  // namespace ga::ops
