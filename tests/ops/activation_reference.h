// The activations in float64, the reference of the tensor-ops tests.
#pragma once

#include <cmath>

#include "gpu_accel/tensor_ops.h"

namespace ga::ops::testing {

inline double activate64(Activation a, double x) {
  switch (a) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return x > 0 ? x : 0;
    case Activation::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::Silu:
      return x / (1.0 + std::exp(-x));
    case Activation::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Activation::Tanh:
      return std::tanh(x);
  }
  return x;
}

}  // namespace ga::ops::testing
