// Shared by the LibTorch baseline's files (libtorch_baseline.cpp, lt_*.cpp): the torch headers,
// the aliases and the error helper. Everything lives in namespace ltb.
#pragma once
#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/autocast_mode.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define SF_AUTOCAST_PER_DEVICE 1
#endif

namespace ltb {

namespace F = torch::nn::functional;
using torch::Tensor;
using torch::indexing::Slice;

[[noreturn]] inline void fail(const std::string& msg) { throw std::runtime_error(msg); }

// v as a JSON number ("%.17g"), null when not finite (libtorch_baseline.cpp).
std::string jnum(double v);

}  // namespace ltb
