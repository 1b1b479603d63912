// Roofline arithmetic and the device peak table (tools/roofline.h, docs/BENCH.md).
#include "tools/roofline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "runtime/error.h"

namespace tools {

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

double dbl(size_t v) { return static_cast<double>(v); }

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Per-channel fp32 vectors a BatchNorm pass touches (see the header): 8 of C floats either way.
constexpr double kBnVectorsFwd = 8, kBnVectorsBwd = 8;
// Nominal FLOPs per element of the BatchNorm passes (shifted statistics d = x - K; s += d; q += d*d:
// 4; apply y = x*scale + shift: 2; recompute xhat and z = gamma*xhat + beta: 4; the two backward
// sums g and g*xhat: 3; dx = gamma*invstd*(g - mean g - xhat*mean(g*xhat)): 4).
constexpr double kBnStatsFlops = 4, kBnApplyFlops = 2, kBnRecomputeFlops = 4, kBnSumsFlops = 3, kBnDxFlops = 4;

}  // namespace

OpCost& OpCost::operator+=(const OpCost& o) {
    tensor_flops += o.tensor_flops;
    simt_flops += o.simt_flops;
    bytes += o.bytes;
    return *this;
}

OpCost operator+(OpCost a, const OpCost& b) { return a += b; }

// ---- convolutions ----

double conv_macs(const kern::ConvShape& s) {
    return dbl(static_cast<size_t>(s.n) * s.p() * s.q() * s.cout) * s.k * s.k * (s.cin / s.groups);
}

bool conv_on_tensor_cores(const kern::ConvShape& s) { return s.groups == 1 || s.cin / s.groups >= 8; }

namespace {

// FLOPs on the unit the convolution runs on.
OpCost conv_flops(const kern::ConvShape& s, double flops) {
    OpCost c;
    (conv_on_tensor_cores(s) ? c.tensor_flops : c.simt_flops) = flops;
    return c;
}

double in_elems(const kern::ConvShape& s) { return dbl(s.in().numel()); }
double out_elems(const kern::ConvShape& s) { return dbl(s.out().numel()); }

}  // namespace

OpCost conv_forward_cost(const kern::ConvShape& s, const Precision& p) {
    s.validate();
    OpCost c = conv_flops(s, 2 * conv_macs(s));
    c.bytes = in_elems(s) * p.act + dbl(s.weight_numel()) * p.weight + out_elems(s) * p.act;
    if (s.bias) {
        c.simt_flops += out_elems(s);  // bias add (fused in the epilogue, on CUDA cores)
        c.bytes += s.cout * 4.0;       // fp32 bias
    }
    return c;
}

OpCost conv_backward_data_cost(const kern::ConvShape& s, bool accumulate, const Precision& p) {
    s.validate();
    OpCost c = conv_flops(s, 2 * conv_macs(s));
    c.bytes = out_elems(s) * p.act + dbl(s.weight_numel()) * p.weight + in_elems(s) * p.act * (accumulate ? 2 : 1);
    return c;
}

OpCost conv_backward_filter_cost(const kern::ConvShape& s, bool accumulate, const Precision& p) {
    s.validate();
    OpCost c = conv_flops(s, 2 * conv_macs(s));
    const double rw = accumulate ? 2 : 1;
    c.bytes = in_elems(s) * p.act + out_elems(s) * p.act + dbl(s.weight_numel()) * p.grad * rw;
    if (s.bias) {
        c.simt_flops += out_elems(s);  // db = sum of dy over N, P, Q
        c.bytes += s.cout * p.grad * rw;
    }
    return c;
}

// ---- BatchNorm + activation ----

double act_forward_flops(kern::Act act) {
    switch (act) {
        case kern::Act::Silu: return 4;  // z * 1 / (1 + exp(-z)): exp, add, divide, multiply
        case kern::Act::Relu: return 1;
        case kern::Act::None: return 0;
    }
    return 0;
}

double act_backward_flops(kern::Act act) {
    switch (act) {
        case kern::Act::Silu: return 7;  // s = sigmoid(z) (3), s * (1 + z * (1 - s)) (4)
        case kern::Act::Relu: return 1;
        case kern::Act::None: return 0;
    }
    return 0;
}

OpCost bn_act_forward_cost(size_t rows, int c, kern::Act act, const Precision& p) {
    SF_CHECK(rows > 0 && c > 0, "bn_act_forward_cost: rows %zu and C %d must be positive", rows, c);
    const double n = dbl(rows) * c;
    OpCost o;
    o.simt_flops = n * (kBnStatsFlops + kBnApplyFlops + act_forward_flops(act));
    o.bytes = 3 * n * p.act + kBnVectorsFwd * c * 4.0;
    return o;
}

OpCost bn_stats_forward_cost(size_t rows, int c, const Precision& p) {
    SF_CHECK(rows > 0 && c > 0, "bn_stats_forward_cost: rows %zu and C %d must be positive", rows, c);
    const double n = dbl(rows) * c;
    OpCost o;
    o.simt_flops = n * kBnStatsFlops;
    o.bytes = n * p.act + kBnVectorsFwd * c * 4.0;
    return o;
}

double bn_apply_flops(kern::Act act) { return kBnApplyFlops + act_forward_flops(act); }

OpCost bn_act_backward_cost(size_t rows, int c, kern::Act act, const Precision& p) {
    SF_CHECK(rows > 0 && c > 0, "bn_act_backward_cost: rows %zu and C %d must be positive", rows, c);
    return bn_act_backward_reduce_cost(rows, c, act, p) + bn_act_backward_dx_cost(rows, c, act, p);
}

namespace {
// One backward pass over n = rows*C elements: both recompute xhat, z, act'(z) and g = dy * act'(z), then
// the reduction pass sums (x and dy read), the dx pass writes dx (x and dy read, dx written); each touches
// half of the per-channel vectors.
OpCost bn_bwd_pass_cost(const char* what, size_t rows, int c, kern::Act act, const Precision& p, double own_flops,
                        int tensors) {
    SF_CHECK(rows > 0 && c > 0, "%s: rows %zu and C %d must be positive", what, rows, c);
    const double n = dbl(rows) * c;
    OpCost o;
    o.simt_flops = n * (kBnRecomputeFlops + act_backward_flops(act) + 1 + own_flops);
    o.bytes = tensors * n * p.act + kBnVectorsBwd / 2 * c * 4.0;
    return o;
}
}  // namespace

OpCost bn_act_backward_reduce_cost(size_t rows, int c, kern::Act act, const Precision& p) {
    return bn_bwd_pass_cost("bn_act_backward_reduce_cost", rows, c, act, p, kBnSumsFlops, 2);
}

OpCost bn_act_backward_dx_cost(size_t rows, int c, kern::Act act, const Precision& p) {
    return bn_bwd_pass_cost("bn_act_backward_dx_cost", rows, c, act, p, kBnDxFlops, 3);
}

// ---- element-wise, resampling, loss, optimizer ----

OpCost eltwise_cost(size_t n, int reads, int writes, double flops_per_elem, double elem_bytes) {
    SF_CHECK(reads >= 0 && writes >= 0, "eltwise_cost: negative tensor count (%d reads, %d writes)", reads, writes);
    OpCost o;
    o.simt_flops = dbl(n) * flops_per_elem;
    o.bytes = dbl(n) * (reads + writes) * elem_bytes;
    return o;
}

OpCost upsample_forward_cost(size_t n_in, int factor, double elem_bytes) {
    SF_CHECK(factor >= 1, "upsample_forward_cost: factor %d must be >= 1", factor);
    const double n_out = dbl(n_in) * factor * factor;
    OpCost o;
    o.simt_flops = 7 * n_out;
    o.bytes = (dbl(n_in) + n_out) * elem_bytes;
    return o;
}

OpCost upsample_backward_cost(size_t n_in, int factor, double elem_bytes, bool accumulate) {
    SF_CHECK(factor >= 1, "upsample_backward_cost: factor %d must be >= 1", factor);
    const double n_out = dbl(n_in) * factor * factor;
    OpCost o;
    o.simt_flops = 8 * n_out;
    o.bytes = (n_out + (accumulate ? 2 : 1) * dbl(n_in)) * elem_bytes;
    return o;
}

OpCost loss_cost(size_t batch, int grid_h, int grid_w, int channels) {
    SF_CHECK(grid_h > 0 && grid_w > 0 && channels > 0, "loss_cost: grid %dx%d, %d channels must be positive", grid_h,
             grid_w, channels);
    const double n = dbl(batch) * grid_h * grid_w * channels;
    OpCost o;
    o.simt_flops = n * kLossFlopsPerElem;
    o.bytes = n * 4.0 * 2;  // fp32 logits read, fp32 gradients written
    return o;
}

OpCost grad_norm_cost(size_t n_params) { return eltwise_cost(n_params, 1, 0, 2, 4.0); }

OpCost adamw_cost(size_t n_params) {
    OpCost o;
    o.simt_flops = 16 * dbl(n_params);
    o.bytes = (16 + 18) * dbl(n_params);
    return o;
}

ConvBnParts conv_bn_act_parts(const kern::ConvShape& s, kern::Act act, bool input_grad, bool dgrad_accumulates,
                              int upsample, bool upsample_bwd_accumulates, bool residual, const Precision& p,
                              bool up_in_bn) {
    s.validate();
    SF_CHECK(upsample >= 1, "conv_bn_act_cost: upsample factor %d must be >= 1", upsample);
    const size_t conv_out = s.out().numel();
    const size_t rows = conv_out / static_cast<size_t>(s.cout) * static_cast<size_t>(upsample) * upsample;
    ConvBnParts r;
    r.conv_fwd = conv_forward_cost(s, p);
    if (input_grad) r.conv_dgrad = conv_backward_data_cost(s, dgrad_accumulates, p);
    r.conv_wgrad = conv_backward_filter_cost(s, true, p);
    r.norm_fwd = bn_act_forward_cost(rows, s.cout, act, p);
    if (residual) r.norm_fwd += eltwise_cost(rows * static_cast<size_t>(s.cout), 1, 0, 1, p.act);
    r.norm_bwd = bn_act_backward_cost(rows, s.cout, act, p);
    if (s.bias) {
        // A conv bias before a BatchNorm (the heads' conv1): the CUDA step adds it in a pass of its own
        // (bias_add_bf16_cuda: the conv output read and written) and sums its gradient in another
        // (column_sum_bf16_cuda: the BN's input gradient read), not in the conv's epilogues, where
        // conv_forward_cost and conv_backward_filter_cost count the bias of a plain conv.
        r.norm_fwd += eltwise_cost(conv_out, 1, 1, 1, p.act);
        r.norm_bwd += eltwise_cost(conv_out, 1, 0, 1, p.act);
    }
    if (upsample > 1) {
        r.resample_fwd = upsample_forward_cost(conv_out, upsample, p.act);
        r.resample_bwd = upsample_backward_cost(conv_out, upsample, p.act, upsample_bwd_accumulates);
        if (up_in_bn) {
            // Two forward and two backward passes read conv_out elements where they read the upsampled ones,
            // each forming them (the upsample's FLOPs); the upsample forward pass is gone.
            const double hi = dbl(rows) * s.cout, saved = 2 * (hi - dbl(conv_out)) * p.act;
            const double flops = 2 * r.resample_fwd.simt_flops;
            r.norm_fwd.bytes -= saved;
            r.norm_bwd.bytes -= saved;
            r.norm_fwd.simt_flops += flops;
            r.norm_bwd.simt_flops += flops;
            r.resample_fwd = OpCost{};
        }
    }
    return r;
}

FwdBwd conv_bn_act_cost(const kern::ConvShape& s, kern::Act act, bool input_grad, int upsample, bool residual,
                        const Precision& p) {
    const ConvBnParts c = conv_bn_act_parts(s, act, input_grad, true, upsample, true, residual, p);
    return {c.conv_fwd + c.norm_fwd + c.resample_fwd, c.norm_bwd + c.conv_wgrad + c.conv_dgrad + c.resample_bwd};
}

FwdBwd up_path_cost(const kern::ConvShape& lo, int factor, model::UpOrder order, const Precision& p) {
    SF_CHECK(lo.k == 1 && lo.groups == 1 && lo.stride == 1 && !lo.bias,
             "up_path_cost: the up path's conv is a plain 1x1 without bias, got %s", lo.describe().c_str());
    SF_CHECK(factor >= 2, "up_path_cost: upsample factor %d must be >= 2", factor);
    if (order == model::UpOrder::ConvFirst) return conv_bn_act_cost(lo, kern::Act::None, true, factor, false, p);
    kern::ConvShape hi = lo;
    hi.h *= factor;
    hi.w *= factor;
    const size_t rows = hi.out().numel() / static_cast<size_t>(hi.cout);
    FwdBwd r;
    r.fwd = upsample_forward_cost(lo.in().numel(), factor, p.act) + conv_forward_cost(hi, p) +
            bn_act_forward_cost(rows, hi.cout, kern::Act::None, p);
    // The conv's backward-data is the first write of the upsampled tensor's gradient (overwrite);
    // the upsample's backward accumulates into the source branch's gradient.
    r.bwd = bn_act_backward_cost(rows, hi.cout, kern::Act::None, p) + conv_backward_filter_cost(hi, true, p) +
            conv_backward_data_cost(hi, false, p) + upsample_backward_cost(lo.in().numel(), factor, p.act);
    return r;
}

// ---- peaks ----

const std::vector<PeakEntry>& peak_table() {
    // Dense (no sparsity) BF16 tensor-core rates with fp32 accumulation, FP32 CUDA-core rates and
    // memory bandwidth, from NVIDIA's product datasheets / architecture whitepapers (datasheets
    // quote sparse tensor rates; the dense rate is half). Boost-clock figures: a card held at a
    // lower clock (power cap, thermals) has a proportionally lower compute roof.
    static const std::vector<PeakEntry> table = {
        // GH200 datasheet: H100-class GPU, 989 TFLOPS BF16 dense (1,979 sparse), 67 FP32; HBM3e 4.9 TB/s
        // (144 GB) or HBM3 4.0 TB/s (96 GB). Before "H200": "GH200" contains it.
        {"gh200 144g", "GH200 (144 GB HBM3e)", 989, 67, 4900, "NVIDIA GH200 datasheet"},
        {"gh200", "GH200 (96 GB HBM3)", 989, 67, 4000, "NVIDIA GH200 datasheet"},
        // H200 NVL datasheet: BF16 1,671 TFLOPS sparse -> 835.5 dense; FP32 60; 4.8 TB/s.
        {"h200 nvl", "H200 NVL", 835.5, 60, 4800, "NVIDIA H200 datasheet (NVL)"},
        // H200 SXM datasheet: BF16 1,979 TFLOPS sparse -> 989 dense; FP32 67; 4.8 TB/s HBM3e.
        {"h200", "H200 SXM", 989, 67, 4800, "NVIDIA H200 datasheet (SXM)"},
        // H100 NVL datasheet: BF16 1,671 sparse -> 835.5 dense; FP32 60; 3.9 TB/s.
        {"h100 nvl", "H100 NVL", 835.5, 60, 3900, "NVIDIA H100 datasheet (NVL)"},
        // H100 PCIe datasheet: BF16 1,513 sparse -> 756 dense; FP32 51; 2.0 TB/s HBM2e.
        {"h100 pcie", "H100 PCIe", 756, 51, 2000, "NVIDIA H100 datasheet (PCIe)"},
        // H100 SXM5 datasheet ("NVIDIA H100 80GB HBM3"): BF16 1,979 sparse -> 989 dense; FP32 67; 3.35 TB/s.
        {"h100", "H100 SXM", 989, 67, 3350, "NVIDIA H100 datasheet (SXM)"},
        // A100 datasheet: BF16 312 TFLOPS dense, FP32 19.5; 80 GB PCIe 1,935 GB/s, 80 GB SXM 2,039 GB/s,
        // 40 GB 1,555 GB/s.
        {"a100 80gb pcie", "A100 80GB PCIe", 312, 19.5, 1935, "NVIDIA A100 datasheet"},
        {"a100-sxm4-80gb", "A100 SXM4 80GB", 312, 19.5, 2039, "NVIDIA A100 datasheet"},
        {"a100", "A100 40GB", 312, 19.5, 1555, "NVIDIA A100 datasheet"},
        // RTX Blackwell (GB202) whitepaper, GeForce RTX 5090: BF16 tensor with FP32 accumulate 209.5 TFLOPS
        // dense (419 sparse); FP32 104.8; GDDR7 1,792 GB/s.
        {"rtx 5090", "GeForce RTX 5090", 209.5, 104.8, 1792, "NVIDIA RTX Blackwell GPU architecture whitepaper"},
        // Ada (AD102) whitepaper, GeForce RTX 4090: BF16 tensor with FP32 accumulate 165.2 TFLOPS dense
        // (330.4 sparse); FP32 82.6; GDDR6X 1,008 GB/s.
        {"rtx 4090", "GeForce RTX 4090", 165.2, 82.6, 1008, "NVIDIA Ada GPU architecture whitepaper"},
    };
    return table;
}

DevicePeaks peaks_for_device(const std::string& device_name, double override_tflops, double override_gbps) {
    SF_CHECK(override_tflops >= 0 && std::isfinite(override_tflops),
             "--peak-tflops must be > 0 (0: from the table), got %g", override_tflops);
    SF_CHECK(override_gbps >= 0 && std::isfinite(override_gbps), "--peak-gbps must be > 0 (0: from the table), got %g",
             override_gbps);
    DevicePeaks d;
    d.device = device_name;
    const std::string name = lower(device_name);
    for (const PeakEntry& e : peak_table()) {
        if (name.find(e.match) == std::string::npos) continue;
        d.entry = e.entry;
        d.source = e.source;
        d.tensor_tflops = e.tensor_tflops;
        d.simt_tflops = e.simt_tflops;
        d.hbm_gbps = e.hbm_gbps;
        break;
    }
    if (override_tflops > 0) {
        d.tensor_tflops = override_tflops;
        if (d.simt_tflops <= 0) d.simt_tflops = override_tflops;
        d.source += std::string(d.source.empty() ? "" : "; ") + "tensor peak given (--peak-tflops or --ceilings)";
    }
    if (override_gbps > 0) {
        d.hbm_gbps = override_gbps;
        d.source += std::string(d.source.empty() ? "" : "; ") + "bandwidth given (--peak-gbps or --ceilings)";
    }
    if (d.source.empty()) d.source = "unknown device: pass --peak-tflops and --peak-gbps";
    return d;
}

Roofline roofline(const OpCost& cost, double measured_ms, const DevicePeaks& peaks) {
    Roofline r;
    const bool measured = measured_ms > 0 && std::isfinite(measured_ms);
    r.achieved_gbps = measured ? cost.bytes / (measured_ms * 1e-3) / 1e9 : kNan;
    r.achieved_tflops = measured ? cost.flops() / (measured_ms * 1e-3) / 1e12 : kNan;
    if (!peaks.known()) {
        r.compute_ms = r.memory_ms = r.floor_ms = r.share = kNan;
        return r;
    }
    r.compute_ms =
        (cost.tensor_flops / (peaks.tensor_tflops * 1e12) + cost.simt_flops / (peaks.simt_tflops * 1e12)) * 1e3;
    r.memory_ms = cost.bytes / (peaks.hbm_gbps * 1e9) * 1e3;
    r.floor_ms = std::max(r.compute_ms, r.memory_ms);
    r.bound = r.compute_ms > r.memory_ms ? "compute" : "memory";
    r.share = measured ? r.floor_ms / measured_ms : kNan;
    return r;
}

}  // namespace tools
