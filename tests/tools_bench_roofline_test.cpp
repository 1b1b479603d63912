// The roofline arithmetic of `slidefuse bench --layers` (tools/roofline.h), hand-checked for the op
// kinds of the model (3x3, depthwise and 1x1 convs, BatchNorm and the rest), its floor / achieved /
// share figures, and the device peak table. Split from tests/tools_bench_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/roofline.h"

namespace {

using namespace tools;

// ---- roofline arithmetic ----

TEST(ToolsBench, RooflineConv3x3HandChecked) {
    const kern::ConvShape s{2, 8, 8, 16, 32, 3, 1, 1, 1, false};  // n h w cin cout k stride pad groups bias
    EXPECT_EQ(conv_macs(s), 2.0 * 8 * 8 * 32 * 9 * 16);           // 589,824
    const OpCost f = conv_forward_cost(s);
    EXPECT_EQ(f.tensor_flops, 1179648);
    EXPECT_EQ(f.simt_flops, 0);
    EXPECT_EQ(f.bytes, 4096 + 9216 + 8192);  // x 2*8*8*16*2, w 32*9*16*2, y 2*8*8*32*2
    const OpCost d = conv_backward_data_cost(s, true);
    EXPECT_EQ(d.tensor_flops, 1179648);
    EXPECT_EQ(d.bytes, 8192 + 9216 + 2 * 4096);  // dy, w, dx read + written
    EXPECT_EQ(conv_backward_data_cost(s, false).bytes, 8192 + 9216 + 4096);
    const OpCost w = conv_backward_filter_cost(s, true);
    EXPECT_EQ(w.bytes, 4096 + 8192 + 2 * 4608 * 4);  // x, dy, fp32 dw read + written
    Precision fp32w;
    fp32w.weight = 4;
    EXPECT_EQ(conv_forward_cost(s, fp32w).bytes, 4096 + 2 * 9216 + 8192);
    // MODEL_SPEC §1.5: a head's conv1 (3x3 128->64 at 64x128) is 0.604 GMAC per sample.
    EXPECT_EQ(conv_macs({1, 64, 128, 128, 64, 3, 1, 1, 1, true}), 603979776.0);
    SF_EXPECT_ERROR(conv_forward_cost({2, 8, 8, 16, 32, 3, 1, 1, 3, false}), "groups");
}

TEST(ToolsBench, RooflineDepthwiseAnd1x1HandChecked) {
    const kern::ConvShape dw{1, 16, 16, 32, 32, 3, 2, 1, 32, false};  // P = Q = 8
    EXPECT_FALSE(conv_on_tensor_cores(dw));
    const OpCost f = conv_forward_cost(dw);
    EXPECT_EQ(f.tensor_flops, 0);
    EXPECT_EQ(f.simt_flops, 2.0 * 8 * 8 * 32 * 9);                            // 36,864
    EXPECT_EQ(f.bytes, 16384 + 32 * 9 * 2 + 4096);                            // x, w (32,3,3,1), y
    EXPECT_TRUE(conv_on_tensor_cores({1, 8, 8, 64, 64, 3, 1, 1, 8, false}));  // 8 channels per group

    const kern::ConvShape pw{2, 4, 4, 64, 128, 1, 1, 0, 1, true};
    EXPECT_EQ(conv_macs(pw), 2.0 * 16 * 128 * 64);  // 262,144
    const OpCost p = conv_forward_cost(pw);
    EXPECT_EQ(p.tensor_flops, 524288);
    EXPECT_EQ(p.simt_flops, 4096);  // bias adds
    EXPECT_EQ(p.bytes, 4096 + 16384 + 8192 + 512);
    const OpCost pg = conv_backward_filter_cost(pw, false);
    EXPECT_EQ(pg.tensor_flops, 524288);
    EXPECT_EQ(pg.simt_flops, 4096);                  // db reduction
    EXPECT_EQ(pg.bytes, 4096 + 8192 + 32768 + 512);  // x, dy, fp32 dw, fp32 db
}

TEST(ToolsBench, RooflineBatchNormAndOthersHandChecked) {
    const OpCost f = bn_act_forward_cost(1000, 16, kern::Act::Silu);
    EXPECT_EQ(f.bytes, 3 * 16000 * 2 + 8 * 16 * 4);  // stats read, apply read + write; 8 fp32 C-vectors
    EXPECT_EQ(f.simt_flops, 16000 * (4 + 2 + 4));
    EXPECT_EQ(f.tensor_flops, 0);
    const OpCost b = bn_act_backward_cost(1000, 16, kern::Act::Silu);
    EXPECT_EQ(b.bytes, 5 * 16000 * 2 + 8 * 16 * 4);
    EXPECT_EQ(b.simt_flops, 16000 * (2 * (4 + 7 + 1) + 3 + 4));
    EXPECT_EQ(bn_act_forward_cost(1000, 16, kern::Act::None).simt_flops, 16000 * 6);
    SF_EXPECT_ERROR(bn_act_forward_cost(0, 16, kern::Act::None), "rows 0");

    const kern::ConvShape s{2, 8, 8, 16, 32, 3, 1, 1, 1, false};
    const FwdBwd cb = conv_bn_act_cost(s, kern::Act::Silu, true);
    const OpCost want_bwd = bn_act_backward_cost(128, 32, kern::Act::Silu) + conv_backward_filter_cost(s, true) +
                            conv_backward_data_cost(s, true);
    EXPECT_EQ(cb.fwd.bytes, conv_forward_cost(s).bytes + bn_act_forward_cost(128, 32, kern::Act::Silu).bytes);
    EXPECT_EQ(cb.bwd.bytes, want_bwd.bytes);
    EXPECT_EQ(cb.bwd.flops(), want_bwd.flops());
    EXPECT_EQ(conv_bn_act_cost(s, kern::Act::Silu, false).bwd.bytes,
              want_bwd.bytes - conv_backward_data_cost(s, true).bytes);
    // With a conv bias (the heads' conv1): its own add pass (128 x 32 read and written) and the gradient's
    // column-sum pass (read), each one FLOP an element.
    kern::ConvShape sb = s;
    sb.bias = true;
    const FwdBwd cbb = conv_bn_act_cost(sb, kern::Act::Silu, true);
    EXPECT_EQ(cbb.fwd.bytes,
              cb.fwd.bytes + conv_forward_cost(sb).bytes - conv_forward_cost(s).bytes + 2 * 128 * 32 * 2);
    EXPECT_EQ(cbb.bwd.bytes, cb.bwd.bytes + conv_backward_filter_cost(sb, true).bytes -
                                 conv_backward_filter_cost(s, true).bytes + 128 * 32 * 2);
    EXPECT_EQ(cbb.fwd.simt_flops,
              cb.fwd.simt_flops + conv_forward_cost(sb).simt_flops - conv_forward_cost(s).simt_flops + 128 * 32);
    // Adding into a sum (ConvBN::sum_into): the apply pass reads the residual (128 x 32 bf16) and adds.
    const FwdBwd cr = conv_bn_act_cost(s, kern::Act::Silu, true, 1, true);
    EXPECT_EQ(cr.fwd.bytes, cb.fwd.bytes + 128 * 32 * 2);
    EXPECT_EQ(cr.fwd.simt_flops, cb.fwd.simt_flops + 128 * 32);
    EXPECT_EQ(cr.bwd.bytes, cb.bwd.bytes);
    // A fusion up path in ConvFirst order: 1x1 conv at 8x8, bilinear x4, BatchNorm over 32x32.
    const kern::ConvShape up{2, 8, 8, 64, 16, 1, 1, 0, 1, false};
    const FwdBwd cu = conv_bn_act_cost(up, kern::Act::None, true, 4);
    const size_t lo = 2 * 8 * 8 * 16;  // conv output elements before the upsample
    EXPECT_EQ(cu.fwd.bytes, conv_forward_cost(up).bytes + upsample_forward_cost(lo, 4, 2).bytes +
                                bn_act_forward_cost(2 * 32 * 32, 16, kern::Act::None).bytes);
    EXPECT_EQ(cu.bwd.bytes, bn_act_backward_cost(2 * 32 * 32, 16, kern::Act::None).bytes +
                                upsample_backward_cost(lo, 4, 2).bytes + conv_backward_filter_cost(up, true).bytes +
                                conv_backward_data_cost(up, true).bytes);
    EXPECT_EQ(cu.fwd.tensor_flops, conv_forward_cost(up).tensor_flops);  // the conv at the low resolution
    SF_EXPECT_ERROR(conv_bn_act_cost(up, kern::Act::None, true, 0), "upsample factor 0");
    // The whole up path in either order, hand-counted (bf16 activations, bf16 weights, fp32 dW).
    // x 2x8x8x64 -> 16 channels, x4 -> 2x32x32. lo: 8192 in, 2048 out; hi: 131072 in, 32768 out.
    const FwdBwd cf = up_path_cost(up, 4, model::UpOrder::ConvFirst);
    EXPECT_EQ(cf.fwd.bytes, cu.fwd.bytes);
    EXPECT_EQ(cf.bwd.bytes, cu.bwd.bytes);
    const FwdBwd uf = up_path_cost(up, 4, model::UpOrder::UpsampleFirst);
    const double w = 16 * 64 * 2, dw = 16 * 64 * 4;
    const double fwd = (8192 + 131072) * 2.0      // upsample: read x, write the x4 tensor
                       + 131072 * 2.0 + w + 32768 * 2.0  // conv: read it and w, write y
                       + 3 * 32768 * 2.0 + 8 * 16 * 4;   // BN: stats read, apply read + write
    const double bwd = 5 * 32768 * 2.0 + 8 * 16 * 4     // BN backward
                       + 131072 * 2.0 + 32768 * 2.0 + 2 * dw  // wgrad: read x, dy; dW read + written
                       + 32768 * 2.0 + w + 131072 * 2.0       // dgrad: read dy, w; write dx (overwrite)
                       + 131072 * 2.0 + 2 * 8192 * 2.0;       // upsample backward: read dy, dx += (r + w)
    EXPECT_EQ(uf.fwd.bytes, fwd);
    EXPECT_EQ(uf.bwd.bytes, bwd);
    EXPECT_EQ(uf.fwd.tensor_flops, 16.0 * cf.fwd.tensor_flops);  // the conv at 16x the pixels
    EXPECT_LT(cf.fwd.bytes + cf.bwd.bytes, 0.5 * (fwd + bwd));
    SF_EXPECT_ERROR(up_path_cost(up, 1, model::UpOrder::ConvFirst), "factor 1");
    SF_EXPECT_ERROR(up_path_cost(s, 2, model::UpOrder::ConvFirst), "plain 1x1");

    EXPECT_EQ(upsample_forward_cost(100, 2, 2).bytes, (100 + 400) * 2);
    EXPECT_EQ(upsample_forward_cost(100, 2, 2).simt_flops, 7 * 400);
    EXPECT_EQ(upsample_backward_cost(100, 4, 2).bytes, (1600 + 200) * 2);
    EXPECT_EQ(eltwise_cost(1000, 2, 1, 1, 2).bytes, 6000);
    EXPECT_EQ(loss_cost(2, 64, 128).bytes, 2.0 * 64 * 128 * 8 * 8);
    EXPECT_EQ(adamw_cost(1000).bytes, 34000);
    EXPECT_EQ(grad_norm_cost(1000).bytes, 4000);
}

TEST(ToolsBench, RooflineFloorAchievedAndShare) {
    const DevicePeaks h100 = peaks_for_device("NVIDIA H100 80GB HBM3");
    OpCost c;
    c.tensor_flops = 1.978e12;  // 2 ms at 989 TFLOP/s
    c.bytes = 3.35e9;           // 1 ms at 3,350 GB/s
    Roofline r = roofline(c, 4.0, h100);
    EXPECT_DOUBLE_EQ(r.compute_ms, 2);
    EXPECT_DOUBLE_EQ(r.memory_ms, 1);
    EXPECT_DOUBLE_EQ(r.floor_ms, 2);
    EXPECT_STREQ(r.bound, "compute");
    EXPECT_DOUBLE_EQ(r.share, 0.5);
    EXPECT_DOUBLE_EQ(r.achieved_tflops, 494.5);
    EXPECT_DOUBLE_EQ(r.achieved_gbps, 837.5);
    c = OpCost{};
    c.simt_flops = 67e9;  // 1 ms on CUDA cores (67 TFLOP/s fp32)
    c.bytes = 6.7e9;      // 2 ms
    r = roofline(c, 2.5, h100);
    EXPECT_DOUBLE_EQ(r.compute_ms, 1);
    EXPECT_DOUBLE_EQ(r.floor_ms, 2);
    EXPECT_STREQ(r.bound, "memory");
    EXPECT_DOUBLE_EQ(r.share, 0.8);
    r = roofline(c, 2.5, peaks_for_device("some future GPU"));
    EXPECT_TRUE(std::isnan(r.floor_ms));
    EXPECT_TRUE(std::isnan(r.share));
    EXPECT_DOUBLE_EQ(r.achieved_gbps, 2680);
    EXPECT_TRUE(std::isnan(roofline(c, 0, h100).achieved_gbps));
}

TEST(ToolsBench, PeakTableLookup) {
    struct Case {
        const char* name;
        const char* entry;
        double tflops, gbps;
    };
    for (const Case& k :
         {Case{"NVIDIA H100 80GB HBM3", "H100 SXM", 989, 3350}, Case{"NVIDIA H100 PCIe", "H100 PCIe", 756, 2000},
          Case{"nvidia h100 pcie", "H100 PCIe", 756, 2000}, Case{"NVIDIA H100 NVL", "H100 NVL", 835.5, 3900},
          Case{"NVIDIA H200", "H200 SXM", 989, 4800}, Case{"NVIDIA H200 NVL", "H200 NVL", 835.5, 4800},
          Case{"NVIDIA GH200 480GB", "GH200 (96 GB HBM3)", 989, 4000},
          Case{"NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 312, 2039},
          Case{"NVIDIA A100-PCIE-40GB", "A100 40GB", 312, 1555},
          Case{"NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 165.2, 1008},
          Case{"NVIDIA GeForce RTX 5090", "GeForce RTX 5090", 209.5, 1792}}) {
        const DevicePeaks p = peaks_for_device(k.name);
        EXPECT_EQ(p.entry, k.entry) << k.name;
        EXPECT_EQ(p.tensor_tflops, k.tflops) << k.name;
        EXPECT_EQ(p.hbm_gbps, k.gbps) << k.name;
        EXPECT_TRUE(p.known()) << k.name;
        EXPECT_NE(p.source.find("NVIDIA"), std::string::npos) << k.name;
    }
    DevicePeaks p = peaks_for_device("Tesla T4");
    EXPECT_FALSE(p.known());
    EXPECT_NE(p.source.find("--peak-tflops"), std::string::npos);
    p = peaks_for_device("Tesla T4", 65, 320);
    EXPECT_TRUE(p.known());
    EXPECT_EQ(p.simt_tflops, 65);
    p = peaks_for_device("NVIDIA H100 80GB HBM3", 0, 3000);
    EXPECT_EQ(p.tensor_tflops, 989);
    EXPECT_EQ(p.simt_tflops, 67);
    EXPECT_EQ(p.hbm_gbps, 3000);
    EXPECT_NE(p.source.find("--peak-gbps"), std::string::npos);
    SF_EXPECT_ERROR(peaks_for_device("x", -1, 0), "--peak-tflops");
}

}  // namespace
