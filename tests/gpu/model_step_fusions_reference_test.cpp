// The CUDA step with each BatchNorm fusion and layer merge switched on, one micro-step against the CPU
// reference and its bf16-weights floor exactly as the default step is judged
// (tests/gpu/step_reference.h), the default step's errors as the baseline: a fusion may round differently,
// never be further off than that.
#include <gtest/gtest.h>

#include "tests/gpu/step_reference.h"
#include "tests/gpu/step_rig.h"

namespace {

using namespace steprig;

// The same oracle for the project's 1x1 conv with the BN statistics from its epilogue (ConvPolicy::pw_custom
// and pw_stats, `bench step --pw-stats`): loss terms and gradients judged against the CPU reference and its
// bf16-weights floor exactly as the default step is (the default step's errors as the baseline).
TEST(CudaStep, PwStatsMicroStepMatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    const CpuReference& r = cpu_reference();
    const GradErrors base = one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 2);
}

// The same oracle for the depthwise ConvBNs' BN statistics from the staged depthwise forward's epilogue
// (ConvPolicy::dw_stats, `bench step --dw-stats`).
TEST(CudaStep, DwStatsMicroStepMatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    const CpuReference& r = cpu_reference();
    const GradErrors base = one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 0, 0, 0, true);
}

// Every BatchNorm fusion of the step at once, with cuDNN for the passes the fusions leave to it: the fused
// LiteBlock (NetShape::fuse_expand_dw), the depthwise BN inside the following 1x1 conv (fuse_dw_pw: its
// forward and wgrad on the project's kernel, its dgrad cuDNN's), the fused depthwise backward with the BN's
// dx inside it and the expand BN's backward reductions in its epilogue (ConvPolicy::dw_fused_bwd,
// dw_fused_bn_bwd, dw_fused_bn_grad), the depthwise BNs' statistics from the depthwise forward's
// epilogue, through the expand's BN prologue (ConvPolicy::dw_stats), and the heads' conv1 merged
// (NetShape::merge_heads) with its BN + ReLU inside the heads' conv2 (fuse_head_bn), and the up paths' upsample
// inside their BN passes (fuse_up_bn). The same oracle and baseline as above.
// Under the emulation the loss equals that of the step with only dw_stats to the last printed digit (measured
// 2026-11-28: 416.074241 both; the default step 416.044033, the statistics epilogue's other summation order
// the one forward difference): there the emulated mma adds each exact bf16 product with fmaf in k order from
// the accumulator, as the emulated cuDNN adds them, so the fused forward is otherwise the default forward
// bit for bit and only the gradients' summation orders differ; on a GPU the tensor cores' sums differ too.
// (The heads' conv1 biases start at zero, where fuse_head_bn's fold changes no forward value: 416.074241 with
// it too, measured 2026-11-29; tests/gpu/model_step_fuse_head_bn_test.cpp sets them far from zero.)
TEST(CudaStep, AllFusionsMicroStepMatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    const CpuReference& r = cpu_reference();
    const GradErrors base = one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 0,
                                             kFuseExpandDw | kFuseDwPw | kMergeHeads | kFuseHeadBn | kFuseUpBn, 4,
                                             true);
}

// The same oracle for the heads' conv1 merged into one 128 -> 256 ConvBN alone (NetShape::merge_heads,
// `bench step --merge-heads`): its gathers and scatters keep every head's parameters, gradients and running
// statistics where the CPU reference has them.
TEST(CudaStep, MergeHeadsMicroStepMatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    const CpuReference& r = cpu_reference();
    const GradErrors base = one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 0, kMergeHeads);
}

// The same oracle for the heads' conv1 BN + ReLU inside their conv2 with the conv1 bias folded into the BN
// (NetShape::fuse_head_bn, `bench step --fuse-head-bn`), on the four heads and on the merged ones.
TEST(CudaStep, FuseHeadBnMicroStepMatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    const CpuReference& r = cpu_reference();
    const GradErrors base = one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 0, kFuseHeadBn);
    one_micro_step_matches_the_cpu_reference(r, model::UpOrder::ConvFirst, &base, 0, kFuseHeadBn | kMergeHeads);
}

}  // namespace
