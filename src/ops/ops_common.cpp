// The shared view checks of the tensor ops and the names of their enums.
#include "ops/ops_common.h"

namespace ga::ops {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None:
      return "none";
    case Activation::Relu:
      return "relu";
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::Silu:
      return "silu";
    case Activation::Sigmoid:
      return "sigmoid";
    case Activation::Tanh:
      return "tanh";
  }
  return "?";
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Mean:
      return "mean";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::ArgMax:
      return "argmax";
    case ReduceOp::LogSumExp:
      return "logsumexp";
  }
  return "?";
}

namespace detail {

std::string shape_text(const TensorView& v) {
  std::string s = "[";
  for (int d = 0; d < v.ndim; ++d) s += (d ? ", " : "") + std::to_string(v.shape[d]);
  return s + "]";
}

void check_view(const TensorView& v, const char* op, const char* name) {
  GA_CHECK(v.ndim >= 0 && v.ndim <= kMaxDims, InvalidArgument, op, ": ", name, " has ", v.ndim, " dimensions (at most ",
           kMaxDims, ")");
  for (int d = 0; d < v.ndim; ++d) {
    GA_CHECK(v.shape[d] >= 0, InvalidArgument, op, ": ", name, " has a negative dimension ", v.shape[d]);
  }
  GA_CHECK(v.data != nullptr || element_count(v) == 0, InvalidArgument, op, ": ", name, " is a null pointer");
}

void check_same_shape(const TensorView& a, const TensorView& b, const char* op, const char* a_name,
                      const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.shape[d] == b.shape[d];
  GA_CHECK(same, InvalidArgument, op, ": ", a_name, " ", shape_text(a), " and ", b_name, " ", shape_text(b),
           " must have the same shape");
}

}  // namespace detail
}  // namespace ga::ops
