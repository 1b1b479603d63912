// The CUDA backend's kernel choices (tools::CudaSection: the config's cuda section, and `bench step`'s
// switches of the same names) as what the network and step take them from: the convolution policy
// (kern::ConvPolicy) and the Exec (programmatic dependent launch). One mapping for training and the
// benchmark, so that `slidefuse train` runs what `bench step` measured.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/conv_cudnn.h"
#include "runtime/exec.h"
#include "tools/config.h"

namespace tools {

// kern::run_conv_policy(deterministic) with the section's switches.
kern::ConvPolicy cuda_conv_policy(const CudaSection& s, bool deterministic);
// The context's Exec with s.pdl; throws rt::Error naming the GPU when pdl is asked of one older than
// compute capability 9.0.
rt::Exec cuda_exec(const rt::CudaContext& ctx, const CudaSection& s);
// The switches a running network has (its GpuOps policy and its Exec's pdl): the inverse of the two above.
CudaSection cuda_section_of(const kern::ConvPolicy& p, bool pdl);
// {"pdl": false, "dw_variants": true, "bn_row_batch": 1, ...}: every switch under its config key (the names
// `bench step` records in each run's extra).
nlohmann::json cuda_section_json(const CudaSection& s);
// "pdl, pw_custom, pw_stats" (the switches that differ from the defaults), or "defaults".
std::string cuda_section_summary(const CudaSection& s);

}  // namespace tools
