// The CPU backend's GLUs and softcap on float32 numpy arrays (C-contiguous; the Python layer checks dtypes and
// makes arrays contiguous, so nothing here converts silently), the tensor-ops library's bindings
// (tensor_ops.cpp), and flash-attention's forward with flash_attn_func's semantics over the CPU attention.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/ops.h"
#include "bindings.h"

namespace py = pybind11;

namespace ga::python {

namespace {

using Array = py::array_t<float, py::array::c_style>;

void require(bool ok, const std::string& message) {
  if (!ok) throw py::value_error(message);
}

Array like(const Array& x) {
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  return Array(shape);
}

template <void (*Glu)(const float*, const float*, float*, int64_t)>
Array glu(const Array& gate, const Array& up, const char* op) {
  require(gate.ndim() == up.ndim() && std::equal(gate.shape(), gate.shape() + gate.ndim(), up.shape()),
          std::string(op) + ": gate and up must have the same shape");
  Array out = like(gate);
  const int64_t n = static_cast<int64_t>(gate.size());
  const float* g = gate.data();
  const float* u = up.data();
  float* o = out.mutable_data();
  py::gil_scoped_release release;
  Glu(g, u, o, n);
  return out;
}

Array softcap(const Array& x, float cap) {
  require(std::isfinite(cap) && cap > 0.0f, "softcap: cap must be a finite positive number");
  Array out = like(x);
  std::memcpy(out.mutable_data(), x.data(), static_cast<size_t>(x.size()) * sizeof(float));
  float* o = out.mutable_data();
  const int64_t n = static_cast<int64_t>(x.size());
  py::gil_scoped_release release;
  cpu::softcap(o, n, cap);
  return out;
}

// flash_attn_func's forward on q [b, sq, h, d], k and v [b, sk, hk, d] (h a multiple of hk: query head i reads
// kv head i / (h / hk)). Query i sees keys j with i + sk - sq - left <= j <= i + sk - sq + right (a bound of -1
// is none; causal sets right = 0): the window is aligned to the bottom-right corner, as flash-attn 2.1+ does.
// A query that sees no key gives 0 and softmax_lse +inf (flash-attn's value for such rows). Each query row is one
// cpu::attention call of one token whose cache is the visible keys' last position: positions first .. last,
// first = last - window_left.
py::tuple flash_attn(const Array& q, const Array& k, const Array& v, float scale, bool causal, int64_t left,
                     int64_t right, float cap, bool want_lse) {
  require(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4,
          "flash_attn_func: q, k and v must be 4-d [batch, seqlen, nheads, headdim]");
  const int64_t b = q.shape(0), sq = q.shape(1), h = q.shape(2), d = q.shape(3);
  const int64_t sk = k.shape(1), hk = k.shape(2);
  require(k.shape(0) == b && v.shape(0) == b, "flash_attn_func: q, k and v must have the same batch size");
  require(v.shape(1) == sk && v.shape(2) == hk, "flash_attn_func: k and v must have the same seqlen and nheads");
  require(k.shape(3) == d && v.shape(3) == d, "flash_attn_func: q, k and v must have the same headdim");
  require(h > 0 && hk > 0 && h % hk == 0, "flash_attn_func: the query heads (" + std::to_string(h) +
                                              ") must be a multiple of the key/value heads (" + std::to_string(hk) +
                                              ")");
  require(d > 0, "flash_attn_func: headdim must be positive");
  require(left >= -1 && right >= -1, "flash_attn_func: window_size bounds must be -1 (none) or >= 0");
  if (causal) right = 0;
  Array out(std::vector<py::ssize_t>{b, sq, h, d});
  Array lse(want_lse ? std::vector<py::ssize_t>{b, h, sq} : std::vector<py::ssize_t>{0});
  const float* qp = q.data();
  const float* kp = k.data();
  const float* vp = v.data();
  float* op = out.mutable_data();
  float* lp = want_lse ? lse.mutable_data() : nullptr;
  {
    py::gil_scoped_release release;
    std::vector<float> work(static_cast<size_t>(cpu::attention_work_floats(std::max<int64_t>(sk, 1), d)));
    std::vector<double> scores;
    const int64_t offset = sk - sq;
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* kb = kp + bi * sk * hk * d;
      const float* vb = vp + bi * sk * hk * d;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, i + offset - left);
        const int64_t hi = right < 0 ? sk - 1 : std::min<int64_t>(sk - 1, i + offset + right);
        const float* qrow = qp + (bi * sq + i) * h * d;
        float* orow = op + (bi * sq + i) * h * d;
        if (hi < lo) {  // no key visible
          std::fill(orow, orow + h * d, 0.0f);
          if (lp) {
            for (int64_t hh = 0; hh < h; ++hh) lp[(bi * h + hh) * sq + i] = std::numeric_limits<float>::infinity();
          }
          continue;
        }
        cpu::AttentionParams p;
        p.n_tokens = 1;
        p.n_head = h;
        p.n_head_kv = hk;
        p.head_dim = d;
        p.pos0 = hi;
        p.scale = scale;
        p.q = qrow;
        p.q_stride = h * d;
        p.kv_type = DType::F32;
        p.k_cache = kb;
        p.v_cache = vb;
        p.out = orow;
        p.out_stride = h * d;
        p.window_left = lo == 0 ? -1 : hi - lo;
        p.softcap = cap;
        p.work = work.data();
        p.work_stride = static_cast<int64_t>(work.size());
        cpu::attention(p, nullptr);
        if (lp) {  // log-sum-exp of the scores the row's softmax saw (double sums)
          for (int64_t hh = 0; hh < h; ++hh) {
            const float* qh = qrow + hh * d;
            const int64_t kvh = hh / (h / hk);
            scores.assign(static_cast<size_t>(hi - lo + 1), 0.0);
            double mx = -std::numeric_limits<double>::infinity();
            for (int64_t j = lo; j <= hi; ++j) {
              const float* kr = kb + (j * hk + kvh) * d;
              double dot = 0.0;
              for (int64_t t = 0; t < d; ++t) dot += static_cast<double>(qh[t]) * kr[t];
              double s = dot * scale;
              if (cap > 0.0f) s = cap * std::tanh(s / cap);
              scores[static_cast<size_t>(j - lo)] = s;
              mx = std::max(mx, s);
            }
            double sum = 0.0;
            for (const double s : scores) sum += std::exp(s - mx);
            lp[(bi * h + hh) * sq + i] = static_cast<float>(mx + std::log(sum));
          }
        }
      }
    }
  }
  if (want_lse) return py::make_tuple(out, lse);
  return py::make_tuple(out, py::none());
}

}  // namespace

void register_ops(py::module_& m) {
  py::module_ ops = m.def_submodule("ops", "CPU tensor ops on float32 numpy arrays (gpu_accel.ops wraps them)");
  ops.def(
      "swiglu", [](const Array& g, const Array& u) { return glu<cpu::swiglu>(g, u, "swiglu"); }, py::arg("gate"),
      py::arg("up"));
  ops.def(
      "geglu_tanh", [](const Array& g, const Array& u) { return glu<cpu::geglu_tanh>(g, u, "geglu_tanh"); },
      py::arg("gate"), py::arg("up"));
  ops.def("softcap", &softcap, py::arg("x"), py::arg("cap"));
  register_tensor_ops(ops);  // tensor_ops.cpp: the tensor-ops library
  ops.def("flash_attn", &flash_attn, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("softmax_scale"),
          py::arg("causal"), py::arg("window_left"), py::arg("window_right"), py::arg("softcap"),
          py::arg("return_lse"));
}

}  // namespace ga::python
