// Roofline model of the training step (docs/BENCH.md): FLOPs and device-memory bytes per op, a
// table of datasheet peaks per GPU, and the time floor max(compute time, memory time) an op could
// reach at those peaks. The bench divides measured times into these to print achieved GB/s,
// TFLOP/s and the share of the roofline each layer reaches.
//
// Model assumptions (each op is charged for what its implementation must move, not for caches):
//   - every tensor an op reads is read from HBM once and every tensor it writes is written once,
//     except where the implementation is known to make several passes (BatchNorm: stats + apply);
//     an ACCUMULATED output (+=) is read and written;
//   - activations and their gradients are bf16 (2 bytes), convolutions read the bf16 working copy
//     of the weights (2 bytes; 4 when run on fp32 masters), weight gradients are fp32 (4 bytes);
//   - FLOPs are split by unit: dense and grouped convolutions run on tensor cores; depthwise
//     convolutions, BatchNorm, activations, element-wise ops, the loss and the optimizer on CUDA
//     cores. The compute time is tensor_flops / tensor peak + simt_flops / fp32 peak.
//   - FLOP counts of element-wise ops are nominal (exp counted as one FLOP); those ops are
//     memory-bound by a wide margin, so the nominal counts never set a floor.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/tensor.h"
#include "model/up_order.h"

namespace tools {

// Bytes per element of each kind of tensor.
struct Precision {
    double act = 2;     // activations and activation gradients (bf16)
    double weight = 2;  // weights as a convolution reads them (bf16 working copy; 4 for fp32)
    double grad = 4;    // weight gradients (fp32)
};

// Work of one op (or a sum of ops).
struct OpCost {
    double tensor_flops = 0;  // executed on tensor cores
    double simt_flops = 0;    // executed on CUDA cores
    double bytes = 0;         // device-memory traffic, read + written
    double flops() const { return tensor_flops + simt_flops; }
    OpCost& operator+=(const OpCost& o);
};
OpCost operator+(OpCost a, const OpCost& b);

// Forward + backward cost of one layer.
struct FwdBwd {
    OpCost fwd, bwd;
};

// ---- convolutions (kern::ConvShape: x (N,H,W,Cin) -> y (N,P,Q,Cout), w (Cout,k,k,Cin/groups)) ----
// Multiply-accumulates of the forward: N*P*Q*Cout*k*k*Cin/groups (the same count for dgrad, wgrad).
double conv_macs(const kern::ConvShape& s);
// Depthwise and thin-group convolutions (fewer than 8 input channels per group, groups > 1) run on
// CUDA cores; everything else on tensor cores.
bool conv_on_tensor_cores(const kern::ConvShape& s);
// y = conv(x, w) [+ b]: 2*MACs (+ N*P*Q*Cout bias adds); reads x, w [, b fp32], writes y.
OpCost conv_forward_cost(const kern::ConvShape& s, const Precision& p = {});
// dx (+)= conv_transpose(dy, w): 2*MACs; reads dy, w; writes dx (read too when accumulate).
OpCost conv_backward_data_cost(const kern::ConvShape& s, bool accumulate, const Precision& p = {});
// dw (+)= x * dy [, db (+)= sum dy]: 2*MACs (+ N*P*Q*Cout); reads x, dy; writes dw [, db] (read too
// when accumulate).
OpCost conv_backward_filter_cost(const kern::ConvShape& s, bool accumulate, const Precision& p = {});

// ---- BatchNorm (batch statistics) + activation, as kernels/bn_act.cu runs it on (rows, C) ----
// forward train: a statistics pass reads x, an apply pass reads x and writes y -> 3 * rows*C
// activation elements, plus 8 fp32 vectors of C (gamma, beta, saved mean/invstd, running stats
// read + written).
OpCost bn_act_forward_cost(size_t rows, int c, kern::Act act, const Precision& p = {});
// backward: a reduction pass reads x, dy; an apply pass reads x, dy and writes dx (overwritten)
// -> 5 * rows*C elements, plus 8 fp32 vectors of C (gamma, beta, saved stats; dgamma, dbeta +=).
OpCost bn_act_backward_cost(size_t rows, int c, kern::Act act, const Precision& p = {});
// The backward's two passes on their own (bn_act_backward_cost is their sum): the reduction pass reads x
// and dy (2 * rows*C elements; 4 fp32 vectors of C), the dx pass reads x and dy and writes dx (3 * rows*C;
// the other 4 vectors). A kernel fusion that takes a pass into a convolution (tools/step_model.h) removes
// that pass's bytes and moves its FLOPs.
OpCost bn_act_backward_reduce_cost(size_t rows, int c, kern::Act act, const Precision& p = {});
OpCost bn_act_backward_dx_cost(size_t rows, int c, kern::Act act, const Precision& p = {});
// The statistics pass alone (bn_stats_train: the fused LiteBlock's expand, whose apply its depthwise
// consumer does on load): reads x once -> rows*C elements, plus the same 8 fp32 vectors of C.
OpCost bn_stats_forward_cost(size_t rows, int c, const Precision& p = {});
// FLOPs per element of a BN apply + activation done on load by a consumer (the depthwise prologue).
double bn_apply_flops(kern::Act act);
// Nominal FLOPs per element of an activation (forward) and of its derivative.
double act_forward_flops(kern::Act act);
double act_backward_flops(kern::Act act);

// ---- element-wise, resampling, loss, optimizer ----
// n elements; `reads` and `writes` tensors of n elements each of elem_bytes; flops_per_elem nominal.
OpCost eltwise_cost(size_t n, int reads, int writes, double flops_per_elem, double elem_bytes);
// Bilinear x factor, n_in = N*H*W*C input elements: reads n_in, writes n_in*f^2 (7 FLOPs per output:
// 4 multiplies, 3 adds).
OpCost upsample_forward_cost(size_t n_in, int factor, double elem_bytes);
// Reads dy (n_in*f^2), accumulates into dx (n_in, read + written; written only with !accumulate, the
// first contribution); 8 FLOPs per dy element.
OpCost upsample_backward_cost(size_t n_in, int factor, double elem_bytes, bool accumulate = true);
// Fused loss over the heads' logits (N, grid_h, grid_w, channels) fp32: reads the logits, writes
// their gradients (targets are rendered on the GPU from label records, which are negligible);
// kLossFlopsPerElem nominal FLOPs per logit.
constexpr double kLossFlopsPerElem = 40;
OpCost loss_cost(size_t batch, int grid_h, int grid_w, int channels = 8);
// Global gradient norm over n fp32 gradients: reads 4 bytes, 2 FLOPs per parameter.
OpCost grad_norm_cost(size_t n_params);
// Fused AdamW (kernels/adamw.cu) per parameter: reads master, grad, m, v (16 bytes); writes master,
// m, v, the bf16 working copy and the zeroed grad (18 bytes); 16 nominal FLOPs.
OpCost adamw_cost(size_t n_params);

// ---- layer composites ----
// conv -> BatchNorm -> act (model::ConvBN). Backward: bn_act backward, conv dgrad (accumulated
// into the input's gradient, as the layers do; skipped when !input_grad, the first conv) and wgrad
// (accumulated into the flat gradient buffer). upsample > 1 (a fusion up path in ConvFirst order):
// conv -> bilinear xupsample -> BatchNorm, the upsample's forward and backward included, the
// BatchNorm over the upsampled rows. residual: the apply pass also reads a residual and adds it
// (ConvBN::sum_into; one more tensor read, one add per element; the backward is the same).
FwdBwd conv_bn_act_cost(const kern::ConvShape& s, kern::Act act, bool input_grad, int upsample = 1,
                        bool residual = false, const Precision& p = {});
// The same layer pass by pass (conv_bn_act_cost sums these), with the gradient writes' modes given:
// dgrad_accumulates (the input's gradient read and written, else written only: the first
// contribution) and upsample_bwd_accumulates (likewise for the conv output's gradient at the input
// resolution, upsample > 1). tools/step_model.h passes the modes the traced backward runs.
// up_in_bn (upsample > 1; NetShape::fuse_up_bn): the BN passes form the upsampled tensor on load from the
// conv output (kern::BnUpsampled): no upsample forward pass, and the four BN passes that read the upsampled
// tensor (statistics, apply, backward reduce, dx) read the conv output instead, each doing the upsample's
// arithmetic.
struct ConvBnParts {
    OpCost conv_fwd, conv_dgrad, conv_wgrad;  // conv_dgrad empty when !input_grad
    OpCost norm_fwd, norm_bwd;                // BN + activation (+ the residual read)
    OpCost resample_fwd, resample_bwd;        // the upsample (upsample > 1)
};
ConvBnParts conv_bn_act_parts(const kern::ConvShape& s, kern::Act act, bool input_grad, bool dgrad_accumulates,
                              int upsample, bool upsample_bwd_accumulates, bool residual, const Precision& p = {},
                              bool up_in_bn = false);
// One HRNet fusion up path (model::FusePath) whole: `lo` is its 1x1 conv at the source resolution
// (N,h,w,Csrc -> Cdst), `factor` the upsample. UpsampleFirst: upsample of the Csrc input (forward;
// backward accumulated into the source's gradient) + the conv -> BN at f*h x f*w (its backward-data
// overwriting the upsampled tensor's gradient); ConvFirst: conv_bn_act_cost(lo, None, true, factor)
// (which charges its upsample's backward as accumulating: the model leans against the swap). The two orders' difference is the modelled gain of
// model.fusion_up_order: conv_first (docs/perf/OPTIMIZATION_LOG.md).
FwdBwd up_path_cost(const kern::ConvShape& lo, int factor, model::UpOrder order, const Precision& p = {});

// ---- device peaks ----
struct DevicePeaks {
    std::string device;        // the name looked up
    std::string entry;         // the table entry matched ("" when none)
    std::string source;        // where the numbers come from (datasheet, user override)
    double tensor_tflops = 0;  // dense BF16 tensor-core TFLOP/s with fp32 accumulation
    double simt_tflops = 0;    // FP32 (non-tensor) TFLOP/s
    double hbm_gbps = 0;       // device memory GB/s (1e9 bytes/s)
    bool known() const { return tensor_tflops > 0 && simt_tflops > 0 && hbm_gbps > 0; }
};

struct PeakEntry {
    const char* match;  // case-insensitive substring of the CUDA device name; first match wins
    const char* entry;
    double tensor_tflops, simt_tflops, hbm_gbps;
    const char* source;
};
// The table, most specific names first (so "H100 PCIe" is tried before "H100").
const std::vector<PeakEntry>& peak_table();

// Looks device_name up in the table; override_tflops / override_gbps (> 0) replace the tensor peak
// and the bandwidth (--peak-tflops / --peak-gbps). For a device not in the table the fp32 peak
// defaults to the tensor peak given (a lower, i.e. optimistic, floor for CUDA-core ops); without
// overrides an unknown device gives known() == false and no floors.
DevicePeaks peaks_for_device(const std::string& device_name, double override_tflops = 0, double override_gbps = 0);

// ---- the roofline of one measured op ----
struct Roofline {
    double compute_ms = 0;          // tensor_flops / tensor peak + simt_flops / fp32 peak
    double memory_ms = 0;           // bytes / bandwidth
    double floor_ms = 0;            // max of the two; NaN when the peaks are unknown
    const char* bound = "unknown";  // "compute" | "memory" | "unknown"
    double achieved_gbps = 0;       // bytes / measured; NaN when measured_ms <= 0
    double achieved_tflops = 0;     // flops / measured
    double share = 0;               // floor_ms / measured_ms: 1 = on the roofline; NaN when unknown
};
Roofline roofline(const OpCost& cost, double measured_ms, const DevicePeaks& peaks);

}  // namespace tools
