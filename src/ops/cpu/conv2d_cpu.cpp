// conv2d on the CPU as an implicit GEMM: out[pixel][o] = sum over (r, s, c) of patch[pixel][(r, s, c)] *
// filter[o][(r, s, c)], per group.
//
// The GEMM's A matrix (im2col) is never built whole: the patches of tile_pixels output pixels are gathered into
// float32 rows (zeros where the window hangs over the padding) and multiplied with the group's filter rows through
// the backend's matmul (the filter, KRSC, is exactly matmul's W: one row of r*s*c/groups elements per output
// channel, read in its stored type); then the epilogue (bias, activation, rounding) is applied to the tile. Tiles
// are split over the pool, one workspace slice per thread, so matmul itself runs single-threaded.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/quant.h"
#include "ops/cpu/cpu_paths.h"
#include "ops/ops_common.h"

namespace ga::ops::cpu_path {

using namespace detail;

namespace {

constexpr int64_t kTilePixels = 32;  // output pixels per tile: matmul's 2-token kernel has 16 pairs to run

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
  g.tile_floats = static_cast<size_t>(plan.cpu.tile_pixels * (g.patch + d.k));
  return g;
}

void run_tile(const Conv2dPlan& plan, const Geometry& geo, const Conv2dArgs& args, int64_t first, int64_t count,
              float* slice) {
  const Conv2dDesc& d = plan.desc;
  float* patches = slice;                                 // [count][patch]
  float* acc = slice + plan.cpu.tile_pixels * geo.patch;  // [count][k]
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

CpuConv2dPath plan_conv2d(const Conv2dPlan& plan, ThreadPool* pool) {
  CpuConv2dPath path;
  path.tile_pixels = std::max<int64_t>(1, std::min(kTilePixels, plan.desc.batch * plan.p * plan.q));
  path.threads = pool_threads(pool);
  return path;
}

size_t conv2d_workspace_bytes(const Conv2dPlan& plan) {
  return geometry_of(plan).tile_floats * static_cast<size_t>(plan.cpu.threads) * sizeof(float);
}

void run_conv2d(const Conv2dPlan& plan, const Conv2dArgs& args, float* ws, ThreadPool* pool) {
  GA_CHECK(pool_threads(pool) <= plan.cpu.threads, InvalidArgument, "conv2d: the plan has workspace for ",
           plan.cpu.threads, " threads, the pool has ", pool_threads(pool), " (plan with the same Exec)");
  const int64_t pixels = plan.desc.batch * plan.p * plan.q;
  const Geometry geo = geometry_of(plan);
  const int64_t tiles = (pixels + plan.cpu.tile_pixels - 1) / plan.cpu.tile_pixels;
  parallel_for(pool, tiles, [&](int64_t begin, int64_t end, int thread) {
    float* slice = ws + static_cast<size_t>(thread) * geo.tile_floats;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = t * plan.cpu.tile_pixels;
      run_tile(plan, geo, args, first, std::min(plan.cpu.tile_pixels, pixels - first), slice);
    }
  });
}

}  // namespace ga::ops::cpu_path
