// The tensor-ops library's CUDA paths (backends/cuda/kernels/tensor_ops) against its CPU reference, through the
// public API (include/gpu_accel/tensor_ops.h): the same call on Device::Cpu (host copies) and Device::Cuda.
//
// Every op over a grid of types (F32, F16, BF16, a mixed F16 -> F32 or BF16 -> F32 call), awkward sizes (1, 7, 19,
// 37, 733, rows long enough for the block-wide paths) and layouts (dense; padded rows; transposed, i.e. a strided
// last dim; broadcasts as stride-0 dims; in place). Outputs are poisoned (all bytes 0xFF: NaN, or -1 for argmax
// indices) on both sides, and the storage outside an output view must still hold the poison after the GPU call.
// Tolerance: the output type's rounding (the two sides run the same float32 formulas with different libm). Argmax
// must match exactly (ties: the first index, a NaN wins). GPU only: SKIPPED without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_harness.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"
#include "gpu_accel/tensor_ops.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;
using namespace ::ga::ops;

enum class Layout { Dense, Padded, Transposed };
constexpr int64_t kPad = 3;  // elements after each padded row

const char* layout_name(Layout l) {
  return l == Layout::Dense ? "dense" : l == Layout::Padded ? "padded" : "T";
}

size_t bytes_of(DType t) {
  return t == DType::F32 ? 4 : t == DType::I64 ? 8 : 2;
}

// A strided tensor in host bytes (its whole storage, padding included) and its device copy.
struct Tensor {
  DType type = DType::F32;
  std::vector<int64_t> shape, strides;
  size_t storage = 0;  // elements
  std::vector<uint8_t> host;

  TensorView view(void* base) const {
    TensorView v;
    v.type = type;
    v.data = base;
    v.ndim = static_cast<int>(shape.size());
    for (int d = 0; d < v.ndim; ++d) {
      v.shape[d] = shape[d];
      v.strides[d] = strides[d];
    }
    return v;
  }
  int64_t count() const {
    int64_t n = 1;
    for (const int64_t s : shape) n *= s;
    return n;
  }
  // The storage offset of linear element i (row-major over shape).
  int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return off;
  }
  double get(const std::vector<uint8_t>& bytes, int64_t off) const {
    const uint8_t* p = bytes.data() + off * bytes_of(type);
    uint16_t h;
    switch (type) {
      case DType::F16:
        std::memcpy(&h, p, 2);
        return fp16_to_f32(h);
      case DType::BF16:
        std::memcpy(&h, p, 2);
        return bf16_to_f32(h);
      case DType::I64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
      default: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
    }
  }
  void set(int64_t off, float v) {
    uint8_t* p = host.data() + off * bytes_of(type);
    const uint16_t h = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
    if (type == DType::F32) {
      std::memcpy(p, &v, 4);
    } else {
      std::memcpy(p, &h, 2);
    }
  }
};

Tensor make(DType type, std::vector<int64_t> shape, Layout layout) {
  Tensor t;
  t.type = type;
  t.shape = std::move(shape);
  const int nd = static_cast<int>(t.shape.size());
  t.strides.assign(nd, 0);
  int64_t stride = 1;
  if (layout == Layout::Transposed && nd >= 2) {  // column-major: the last dim is the strided one
    for (int d = 0; d < nd; ++d) {
      t.strides[d] = stride;
      stride *= t.shape[d];
    }
  } else {
    for (int d = nd - 1; d >= 0; --d) {
      t.strides[d] = stride;
      stride *= t.shape[d] + (layout == Layout::Padded && d == nd - 1 ? kPad : 0);
    }
  }
  t.storage = static_cast<size_t>(std::max<int64_t>(stride, 1));
  t.host.assign(t.storage * bytes_of(type), 0xFF);
  return t;
}

void fill_random(Tensor& t, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  for (int64_t i = 0; i < t.count(); ++i) t.set(t.offset(i), d(rng));
}

double tolerance(DType out) {
  return out == DType::F16 ? 2e-3 : out == DType::BF16 ? 1.6e-2 : 2e-5;
}

using Call = std::function<Status(const std::vector<TensorView>& in, const TensorView& out, const Exec& exec)>;

// Runs `call` on the CPU (host copies) and the GPU (device copies), both outputs poisoned, and compares out's
// elements; out's storage outside the view must keep the GPU poison. in_place: out is ins[0] itself.
void check(Parity& parity, CachingAllocator& alloc, const std::string& name, const std::vector<Tensor>& ins,
           const Tensor& out_spec, const Call& call, bool in_place = false) {
  std::vector<TensorView> host_in, dev_in;
  std::vector<std::vector<uint8_t>> host_copies;
  std::vector<DeviceArray<uint8_t>> dev_arrays;
  host_copies.reserve(ins.size());
  dev_arrays.reserve(ins.size());
  for (const Tensor& t : ins) {
    host_copies.push_back(t.host);
    dev_arrays.emplace_back(alloc, t.host.size());
    dev_arrays.back().upload(t.host);
    host_in.push_back(t.view(host_copies.back().data()));
    dev_in.push_back(t.view(dev_arrays.back().get()));
  }
  std::vector<uint8_t> ref_bytes(out_spec.host.size(), 0xFF);
  DeviceArray<uint8_t> dout(alloc, out_spec.host.size());
  dout.poison();
  const TensorView host_out = in_place ? host_in[0] : out_spec.view(ref_bytes.data());
  const TensorView dev_out = in_place ? dev_in[0] : out_spec.view(dout.get());
  Exec cpu;
  Exec gpu;
  gpu.device = Device::Cuda;
  const Status want = call(host_in, host_out, cpu);
  ASSERT_TRUE(want.ok()) << name << ": CPU reference failed: " << want.error()->message();
  const Status got_status = call(dev_in, dev_out, gpu);
  ASSERT_TRUE(got_status.ok()) << name << ": " << got_status.error()->message();
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got_bytes = in_place ? dev_arrays[0].download() : dout.download();
  const std::vector<uint8_t>& ref_src = in_place ? host_copies[0] : ref_bytes;
  const Tensor& layout = in_place ? ins[0] : out_spec;
  const int64_t n = layout.count();
  std::vector<float> got(static_cast<size_t>(n));
  std::vector<double> ref(static_cast<size_t>(n));
  std::vector<bool> covered(layout.storage, false);
  double scale = 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = layout.offset(i);
    covered[static_cast<size_t>(off)] = true;
    got[static_cast<size_t>(i)] = static_cast<float>(layout.get(got_bytes, off));
    ref[static_cast<size_t>(i)] = layout.get(ref_src, off);
    if (std::isfinite(ref[static_cast<size_t>(i)])) scale = std::max(scale, std::fabs(ref[static_cast<size_t>(i)]));
    if (std::isinf(ref[static_cast<size_t>(i)]) && got[static_cast<size_t>(i)] == ref[static_cast<size_t>(i)]) {
      ref[static_cast<size_t>(i)] = 0.0;  // the same infinity (Parity compares differences, inf - inf is NaN)
      got[static_cast<size_t>(i)] = 0.0f;
    }
  }
  if (layout.type == DType::I64) {
    parity.compare(name, got.data(), ref.data(), got.size(), 0.0, 0.0);
  } else {
    const double rtol = tolerance(layout.type);
    parity.compare(name, got.data(), ref.data(), got.size(), rtol, rtol * 0.05 * scale);
  }
  if (!in_place) {  // the padding between rows is not part of the output
    const size_t eb = bytes_of(layout.type);
    for (size_t e = 0; e < layout.storage; ++e) {
      if (covered[e]) continue;
      for (size_t b = 0; b < eb; ++b) {
        if (got_bytes[e * eb + b] != 0xFF) {
          parity.fail(name + ": wrote outside its output view (storage element " + std::to_string(e) + ")");
          return;
        }
      }
    }
  }
}

std::string shape_name(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// The type pairs (input, output) every op runs: each type, and two mixes (the run-time-typed kernels).
struct Types {
  DType in, out;
};
const Types kTypes[] = {{DType::F32, DType::F32},
                        {DType::F16, DType::F16},
                        {DType::BF16, DType::BF16},
                        {DType::F16, DType::F32},
                        {DType::BF16, DType::F32}};

std::string types_name(Types t) {
  return str(dtype_name(t.in), "->", dtype_name(t.out));
}

TEST(CudaTensorOps, UnaryMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("tensor_ops unary");
  std::mt19937 rng(1);
  const Activation acts[] = {Activation::None, Activation::Relu,    Activation::Gelu, Activation::GeluTanh,
                             Activation::Silu, Activation::Sigmoid, Activation::Tanh};
  const std::vector<std::vector<int64_t>> shapes = {{}, {1}, {7}, {733}, {19, 37}, {7, 19, 37}, {5, 4096}, {3, 70001}};
  for (const Activation act : acts) {
    for (const Types t : kTypes) {
      for (const auto& shape : shapes) {
        for (const Layout l : {Layout::Dense, Layout::Padded, Layout::Transposed}) {
          if (l != Layout::Dense && shape.size() < 2) continue;
          Tensor x = make(t.in, shape, l);
          fill_random(x, rng, 3.0f);
          const Tensor out = make(t.out, shape, l == Layout::Transposed ? Layout::Dense : l);
          const std::string name =
              str(activation_name(act), " ", types_name(t), " ", shape_name(shape), " ", layout_name(l));
          check(parity, alloc, name, {x}, out,
                [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) {
                  return unary(act, in[0], o, e);
                });
          if (t.in == t.out && l == Layout::Padded) {
            check(
                parity, alloc, name + " in place", {x}, out,
                [&](const std::vector<TensorView>& in, const TensorView&, const Exec& e) {
                  return unary(act, in[0], in[0], e);
                },
                true);
          }
        }
      }
    }
  }
  parity.finish();
}

TEST(CudaTensorOps, BinaryWithBroadcastingMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("tensor_ops binary");
  std::mt19937 rng(2);
  struct Case {
    std::vector<int64_t> a, b, out;
  };
  const std::vector<Case> cases = {{{19, 37}, {19, 37}, {19, 37}},
                                   {{19, 37}, {37}, {19, 37}},
                                   {{19, 37}, {19, 1}, {19, 37}},
                                   {{7, 1, 37}, {19, 1}, {7, 19, 37}},
                                   {{}, {733}, {733}},
                                   {{733, 1}, {1, 19}, {733, 19}},
                                   {{1}, {7}, {7}},
                                   {{64, 1024}, {1024}, {64, 1024}},
                                   {{3, 70001}, {3, 70001}, {3, 70001}},
                                   {{2, 3, 5, 7}, {3, 1, 7}, {2, 3, 5, 7}}};
  for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Mul}) {
    for (const Types t : kTypes) {
      for (const Case& c : cases) {
        for (const Layout l : {Layout::Dense, Layout::Padded, Layout::Transposed}) {
          if (l != Layout::Dense && c.out.size() < 2) continue;
          Tensor a = make(t.in, c.a, c.a.size() >= 2 ? l : Layout::Dense);
          Tensor b = make(t.out, c.b, Layout::Dense);  // a second type in the mixed cases
          fill_random(a, rng, 2.0f);
          fill_random(b, rng, 2.0f);
          const Tensor out = make(t.out, c.out, l == Layout::Padded ? l : Layout::Dense);
          const std::string name = str(op == BinaryOp::Add ? "add " : "mul ", types_name(t), " ", shape_name(c.a), " ",
                                       shape_name(c.b), " ", layout_name(l));
          check(parity, alloc, name, {a, b}, out,
                [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) {
                  return binary(op, in[0], in[1], o, e);
                });
        }
      }
    }
  }
  parity.finish();
}

TEST(CudaTensorOps, ReductionsAlongEveryAxisMatchCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("tensor_ops reduce");
  std::mt19937 rng(3);
  const ReduceOp rops[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::ArgMax, ReduceOp::LogSumExp};
  const std::vector<std::vector<int64_t>> shapes = {
      {1}, {7}, {733}, {19, 37}, {7, 19, 37}, {37, 733}, {3, 4096}, {4096, 3}, {2, 100003}, {100003, 2}, {5, 1, 733}};
  for (const ReduceOp rop : rops) {
    for (const Types t : kTypes) {
      for (const auto& shape : shapes) {
        for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis) {
          for (const Layout l : {Layout::Dense, Layout::Padded, Layout::Transposed}) {
            if (l != Layout::Dense && shape.size() < 2) continue;
            Tensor x = make(t.in, shape, l);
            fill_random(x, rng, 2.0f);
            std::vector<int64_t> rest;
            for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
              if (d != axis) rest.push_back(shape[d]);
            }
            const DType ot = rop == ReduceOp::ArgMax ? DType::I64 : t.out;
            const Tensor out = make(ot, rest, rest.size() >= 2 && l == Layout::Padded ? l : Layout::Dense);
            const std::string name =
                str(reduce_name(rop), " ", types_name(t), " ", shape_name(shape), " axis ", axis, " ", layout_name(l));
            check(parity, alloc, name, {x}, out,
                  [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) {
                    return reduce(rop, in[0], axis, o, e);
                  });
          }
        }
      }
    }
  }
  parity.finish();
}

// NaN, infinities and ties: the rules the CPU reference documents (argmax: first maximum, first NaN; logsumexp of
// all -inf is -inf, a +inf gives +inf; softmax of a row whose max is not finite is NaN).
TEST(CudaTensorOps, SpecialValuesFollowTheCpuRules) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("tensor_ops special values");
  const float inf = INFINITY, nan = NAN;
  // [rows][n] with n long enough for the vector and block paths: each row one pattern at a few positions.
  const int64_t n = 733;
  const std::vector<std::vector<std::pair<int64_t, float>>> rows = {
      {},                                 // all equal (a tie everywhere): argmax 0
      {{5, 2.0f}, {400, 2.0f}},           // a tie between two maxima: the first
      {{9, nan}, {500, nan}, {3, 7.0f}},  // NaNs: the first NaN
      {{100, inf}},                       // +inf
      {{100, inf}, {600, inf}},           // two +inf: logsumexp +inf, softmax NaN
      {{0, -inf}, {732, -inf}},           // some -inf
  };
  for (const DType type : {DType::F32, DType::BF16}) {
    Tensor x = make(type, {static_cast<int64_t>(rows.size()) + 1, n}, Layout::Dense);
    for (int64_t r = 0; r <= static_cast<int64_t>(rows.size()); ++r) {
      for (int64_t i = 0; i < n; ++i) x.set(r * n + i, r == static_cast<int64_t>(rows.size()) ? -inf : 1.0f);
      if (r < static_cast<int64_t>(rows.size())) {
        for (const auto& [at, v] : rows[static_cast<size_t>(r)]) x.set(r * n + at, v);
      }
    }
    for (const ReduceOp rop : {ReduceOp::Max, ReduceOp::ArgMax, ReduceOp::LogSumExp, ReduceOp::Sum}) {
      const Tensor out = make(rop == ReduceOp::ArgMax ? DType::I64 : type, {x.shape[0]}, Layout::Dense);
      check(parity, alloc, str(reduce_name(rop), " special ", dtype_name(type)), {x}, out,
            [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) {
              return reduce(rop, in[0], 1, o, e);
            });
    }
    check(parity, alloc, str("softmax special ", dtype_name(type)), {x}, make(type, x.shape, Layout::Dense),
          [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) { return softmax(in[0], o, e); });
  }
  parity.finish();
}

TEST(CudaTensorOps, NormsAndSoftmaxMatchCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("tensor_ops norms");
  std::mt19937 rng(4);
  const std::vector<std::vector<int64_t>> shapes = {{1, 1}, {7, 1},    {19, 7},    {37, 19},   {5, 733},
                                                    {4096}, {3, 4096}, {2, 20000}, {2, 3, 37}, {64, 1024}};
  enum class Kind { Rms, LayerWB, LayerW, LayerNone, Softmax };
  for (const Kind kind : {Kind::Rms, Kind::LayerWB, Kind::LayerW, Kind::LayerNone, Kind::Softmax}) {
    for (const Types t : kTypes) {
      for (const auto& shape : shapes) {
        for (const Layout l : {Layout::Dense, Layout::Padded, Layout::Transposed}) {
          if (l != Layout::Dense && shape.size() < 2) continue;
          Tensor x = make(t.in, shape, l);
          fill_random(x, rng, 2.0f);
          const int64_t n = shape.back();
          Tensor w = make(t.out, {n}, Layout::Dense), b = make(DType::F32, {n}, Layout::Dense);
          fill_random(w, rng, 1.0f);
          fill_random(b, rng, 1.0f);
          const Tensor out = make(t.out, shape, l == Layout::Transposed ? Layout::Dense : l);
          const char* kname[] = {"rms_norm", "layer_norm w+b", "layer_norm w", "layer_norm", "softmax"};
          const std::string name =
              str(kname[static_cast<int>(kind)], " ", types_name(t), " ", shape_name(shape), " ", layout_name(l));
          const Call call = [&](const std::vector<TensorView>& in, const TensorView& o, const Exec& e) {
            const TensorView none;
            switch (kind) {
              case Kind::Rms:
                return rms_norm(in[0], in[1], 1e-6f, o, e);
              case Kind::LayerWB:
                return layer_norm(in[0], in[1], in[2], 1e-5f, o, e);
              case Kind::LayerW:
                return layer_norm(in[0], in[1], none, 1e-5f, o, e);
              case Kind::LayerNone:
                return layer_norm(in[0], none, none, 1e-5f, o, e);
              default:
                return softmax(in[0], o, e);
            }
          };
          check(parity, alloc, name, {x, w, b}, out, call);
          if (t.in == t.out && l == Layout::Dense) {
            check(
                parity, alloc, name + " in place", {x, w, b}, out,
                [&](const std::vector<TensorView>& in, const TensorView&, const Exec& e) { return call(in, in[0], e); },
                true);
          }
        }
      }
    }
  }
  parity.finish();
}

// What only the CUDA path can refuse: host memory passed as Device::Cuda.
TEST(CudaTensorOps, HostPointersAreRefused) {
  GA_REQUIRE_CUDA_DEVICE();
  std::vector<float> host(64, 1.0f);
  Tensor spec = make(DType::F32, {8, 8}, Layout::Dense);
  const TensorView v = spec.view(host.data());
  Exec gpu;
  gpu.device = Device::Cuda;
  const Status s = unary(Activation::Relu, v, v, gpu);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error()->kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(s.error()->message().find("not device memory"), std::string::npos) << s.error()->message();
}

}  // namespace
}  // namespace ga::test::cuda
