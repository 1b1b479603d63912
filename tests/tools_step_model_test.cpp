// The step's cost model (tools/step_model.h) and `slidefuse plan --roofline` (tools/plan_roofline.h):
// rows for every layer and op with their scopes, the traced write modes against the planner's own
// counts, a hand-counted row, the floor's arithmetic, and the command's document and errors.
#include <gtest/gtest.h>

#include <set>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tests/support/ceilings_fixture.h"
#include "tools/plan_roofline.h"
#include "tools/step_model.h"

namespace {

using tools::StepModelRow;
using tools::StepPart;

model::NetShape small(model::UpOrder order = model::UpOrder::UpsampleFirst) { return {2, 2, 128, 256, order}; }

const StepModelRow& row(const std::vector<StepModelRow>& rows, const std::string& name) {
    for (const StepModelRow& r : rows)
        if (r.name == name) return r;
    ADD_FAILURE() << "no row " << name;
    return rows.front();
}

TEST(StepModel, EveryLayerAndOpHasARowWithItsOwnScopes) {
    for (model::UpOrder order : {model::UpOrder::UpsampleFirst, model::UpOrder::ConvFirst}) {
        const model::SiderNetCuda net(small(order), model::DryRun{});
        const std::vector<StepModelRow> rows = tools::step_model(net.plan(), small(order));
        ASSERT_EQ(rows.size(), net.plan().layers().size() + net.plan().op_uses().size() + 3);
        std::set<std::string> names, scopes;
        for (const StepModelRow& r : rows) {
            EXPECT_TRUE(names.insert(r.name).second) << "duplicate row " << r.name;
            for (const std::string& sc : {r.fwd_scope, r.bwd_scope})
                if (!sc.empty()) {
                    EXPECT_TRUE(scopes.insert(sc).second) << "scope " << sc << " in two rows";
                }
            EXPECT_GT(r.fwd().bytes + r.bwd().bytes, 0) << r.name;
        }
        for (const model::LayerUse& l : net.plan().layers()) EXPECT_EQ(names.count(l.name), 1u) << l.name;
        // The ops outside the layers: 3 LiteFPN upsamples (+ 10 up-path ones in UpsampleFirst), 3
        // weighted fuses, and a gradient sum per LiteBlock and per fusion destination.
        int up = 0, fuse = 0, sums = 0;
        for (const model::OpUse& o : net.plan().op_uses()) {
            up += o.kind == model::OpUse::Kind::Upsample;
            fuse += o.kind == model::OpUse::Kind::WeightedFuse;
            sums += o.kind == model::OpUse::Kind::GradSum;
        }
        EXPECT_EQ(up, order == model::UpOrder::UpsampleFirst ? 13 : 3);
        EXPECT_EQ(fuse, 3);
        EXPECT_GT(sums, 0);
        EXPECT_EQ(row(rows, "loss").fwd_scope, "loss");
        EXPECT_EQ(row(rows, "optimizer").fwd_scope, "optimizer");
        EXPECT_EQ(row(rows, "data: preprocess").fwd_scope, "data: preprocess");
    }
}

// The write modes the model reads from the traced scopes agree with what the planner counts from the
// same trace by tensor: bytes first written by a conv backward-data, and the gradient copies.
TEST(StepModel, TracedWriteModesAgreeWithThePlannersCounts) {
    {
        const model::SiderNetCuda net(small(), model::DryRun{});
        const model::MemoryPlan m = net.plan().memory();
        size_t first = 0;
        for (const model::LayerUse& l : net.plan().layers())  // the CUDA heads' 1x1 is no conv dgrad op
            if (l.batchnorm && l.input_grad && !l.input_grad_accumulates) first += l.shape.in().numel() * 2;
        EXPECT_EQ(first, m.grad_dgrad_first);
        size_t copies = 0, copied = 0;
        for (const model::OpUse& o : net.plan().op_uses()) {
            const int writes = o.kind == model::OpUse::Kind::WeightedFuse ? 2 : 1;
            EXPECT_EQ(o.grad_writes, writes) << o.name;
            if (o.kind == model::OpUse::Kind::GradSum && o.grad_accumulates == 0) {
                ++copies;
                copied += o.in.numel() * 2;
            }
            // A LiteBlock's input gradient is first written by its expand conv's backward-data.
            if (o.name.find(".residual") != std::string::npos) {
                EXPECT_EQ(o.grad_accumulates, 1) << o.name;
            }
        }
        EXPECT_EQ(copies, m.grad_copies);
        EXPECT_EQ(copied, m.grad_copied);
        EXPECT_GT(copies, 0u);
    }
    {  // the CPU network: its heads' dgrad is a conv backward-data too
        const model::SiderNetT<float> net(small(), model::DryRun{});
        size_t first = 0;
        for (const model::LayerUse& l : net.plan().layers())
            if (l.input_grad && !l.input_grad_accumulates) first += l.shape.in().numel() * 4;
        EXPECT_EQ(first, net.plan().memory().grad_dgrad_first);
    }
}

// One depthwise layer counted by hand: stage2.branch_1_4.0.dw_conv at batch 2, 128x256 input:
// x, y (2,32,64,64) bf16 = 262144 elements, weights 64x3x3 = 576. Its input (the expand's output)
// has no other reader, so the backward-data's write is that gradient's only one: no read of dx.
TEST(StepModel, HandCountedDepthwiseRow) {
    const StepModelRow r = row(tools::step_model(small()), "stage2.branch_1_4.0.dw_conv");
    EXPECT_EQ(r.kind, "conv 3x3 depthwise");
    const double n = 262144;
    EXPECT_DOUBLE_EQ(r.at(StepPart::ConvFwd).bytes, n * 2 + 576 * 2 + n * 2);
    EXPECT_DOUBLE_EQ(r.at(StepPart::ConvDgrad).bytes, n * 2 + 576 * 2 + n * 2);
    EXPECT_DOUBLE_EQ(r.at(StepPart::ConvWgrad).bytes, n * 2 + n * 2 + 576 * 4 * 2);
    EXPECT_DOUBLE_EQ(r.at(StepPart::ConvFwd).simt_flops, 2 * n * 9);  // on CUDA cores, 9 MACs per output
    EXPECT_DOUBLE_EQ(r.at(StepPart::ConvFwd).tensor_flops, 0);
    EXPECT_DOUBLE_EQ(r.at(StepPart::NormFwd).bytes, 3 * n * 2 + 8 * 64 * 4);  // stats read, apply read + write
    EXPECT_DOUBLE_EQ(r.at(StepPart::NormBwd).bytes, 5 * n * 2 + 8 * 64 * 4);  // two passes over x, dy; dx written
    EXPECT_DOUBLE_EQ(r.at(StepPart::OtherFwd).bytes + r.at(StepPart::OtherBwd).bytes, 0);
    // The LiteBlock's project writes the block's sum: its apply pass reads the residual too
    // (2,32,64,32) = 131072 elements.
    const StepModelRow p = row(tools::step_model(small()), "stage2.branch_1_4.0.pw_project");
    EXPECT_DOUBLE_EQ(p.at(StepPart::NormFwd).bytes, 4 * 131072.0 * 2 + 8 * 32 * 4);
    // ConvFirst up path (stage2 1/8 -> 1/4: (2,16,32,64) -> 32 channels, x2): the upsample's backward
    // is the only write of the low-resolution gradient: dy (2,32,64,32) read, dx (2,16,32,32) written.
    const StepModelRow u = row(tools::step_model(small(model::UpOrder::ConvFirst)), "stage2.fusion.up_1_8_to_1_4.1");
    EXPECT_EQ(u.kind, "conv 1x1 up path");
    EXPECT_DOUBLE_EQ(u.at(StepPart::OtherBwd).bytes, (131072.0 + 32768.0) * 2);
}

// A consumer that applies its producer's BN + activation (SiLU unless said) on load (n input elements): the
// same bytes as the unfused row in every conv pass, and the apply's FLOPs added to its forward and its
// backward-filter.
void expect_prologue_row(const StepModelRow& plain, const StepModelRow& fused, double n,
                         kern::Act act = kern::Act::Silu) {
    for (StepPart part : {StepPart::ConvFwd, StepPart::ConvDgrad, StepPart::ConvWgrad})
        EXPECT_DOUBLE_EQ(fused.at(part).bytes, plain.at(part).bytes);
    const double apply = n * tools::bn_apply_flops(act);
    EXPECT_GT(apply, 0);
    EXPECT_DOUBLE_EQ(fused.at(StepPart::ConvFwd).simt_flops, plain.at(StepPart::ConvFwd).simt_flops + apply);
    EXPECT_DOUBLE_EQ(fused.at(StepPart::ConvWgrad).simt_flops, plain.at(StepPart::ConvWgrad).simt_flops + apply);
    EXPECT_DOUBLE_EQ(fused.at(StepPart::ConvDgrad).simt_flops, plain.at(StepPart::ConvDgrad).simt_flops);
}

// Over the step: exactly 2 x the output of every layer that leaves its BN to its consumer (in the fused
// network fs; 4 x with a conv bias, whose add pass goes too) less, in the BN forward pass only; every other
// byte the same.
void expect_only_the_apply_passes_go(const std::vector<StepModelRow>& plain, const std::vector<StepModelRow>& fused,
                                     const model::NetShape& fs) {
    const model::SiderNetCuda net(fs, model::DryRun{});
    double applied_bytes = 0;
    for (const model::LayerUse& l : net.plan().layers())  // the apply pass; with a conv bias, its add pass too
        if (l.bn_applied_by_consumer) applied_bytes += (l.shape.bias ? 4.0 : 2.0) * l.shape.out().numel() * 2;
    EXPECT_GT(applied_bytes, 0);
    double bp = 0, bf = 0, other_p = 0, other_f = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_EQ(plain[i].name, fused[i].name);
        bp += plain[i].at(StepPart::NormFwd).bytes;
        bf += fused[i].at(StepPart::NormFwd).bytes;
        other_p += plain[i].fwd().bytes + plain[i].bwd().bytes - plain[i].at(StepPart::NormFwd).bytes;
        other_f += fused[i].fwd().bytes + fused[i].bwd().bytes - fused[i].at(StepPart::NormFwd).bytes;
    }
    EXPECT_DOUBLE_EQ(bp - bf, applied_bytes);
    EXPECT_DOUBLE_EQ(other_p, other_f);
}

// The fused LiteBlock (NetShape::fuse_expand_dw): the expand keeps only its statistics pass (x read
// once, no output written), its depthwise consumer reads the same bytes and applies BN + SiLU to every
// input element it loads in the forward and in the backward-filter; nothing else changes. Per
// LiteBlock, 2 x the expand output's bytes less: stage2.branch_1_4.0 (2,32,64,64) bf16.
TEST(StepModel, FusedLiteBlockRows) {
    model::NetShape fs = small();
    fs.fuse_expand_dw = true;
    const std::vector<StepModelRow> plain = tools::step_model(small()), fused = tools::step_model(fs);
    ASSERT_EQ(plain.size(), fused.size());
    const double n = 262144;
    const StepModelRow& ep = row(plain, "stage2.branch_1_4.0.pw_expand");
    const StepModelRow& ef = row(fused, "stage2.branch_1_4.0.pw_expand");
    EXPECT_DOUBLE_EQ(ef.at(StepPart::NormFwd).bytes, n * 2 + 8 * 64 * 4);
    EXPECT_DOUBLE_EQ(ep.at(StepPart::NormFwd).bytes - ef.at(StepPart::NormFwd).bytes, 2 * n * 2);
    EXPECT_DOUBLE_EQ(ef.at(StepPart::NormBwd).bytes, ep.at(StepPart::NormBwd).bytes);
    expect_prologue_row(row(plain, "stage2.branch_1_4.0.dw_conv"), row(fused, "stage2.branch_1_4.0.dw_conv"), n);
    expect_only_the_apply_passes_go(plain, fused, fs);  // every expand output, twice
}

// NetShape::fuse_dw_pw: each depthwise ConvBN keeps only its statistics pass and the 1x1 conv after it
// applies its BN + SiLU to every input element it loads (forward and backward-filter), reading the same
// bytes. Over the step exactly 2 x every depthwise output less, in the BN forward pass only.
TEST(StepModel, FuseDwPwRows) {
    model::NetShape fs = small();
    fs.fuse_dw_pw = true;
    const std::vector<StepModelRow> plain = tools::step_model(small()), fused = tools::step_model(fs);
    ASSERT_EQ(plain.size(), fused.size());
    const double n = 262144;  // stage2.branch_1_4.0's depthwise output: (2,32,64,64)
    const StepModelRow& dp = row(plain, "stage2.branch_1_4.0.dw_conv");
    const StepModelRow& df = row(fused, "stage2.branch_1_4.0.dw_conv");
    EXPECT_DOUBLE_EQ(dp.at(StepPart::NormFwd).bytes - df.at(StepPart::NormFwd).bytes, 2 * n * 2);
    expect_prologue_row(row(plain, "stage2.branch_1_4.0.pw_project"), row(fused, "stage2.branch_1_4.0.pw_project"), n);
    expect_only_the_apply_passes_go(plain, fused, fs);  // every depthwise output, twice
}

// NetShape::fuse_head_bn: each head's conv1 (or the merged one) keeps only its statistics pass (its bias add
// pass folded away too) and each conv2 applies its BN + ReLU to every input element it loads, its producer
// the conv1 (merged: the one layer before the four conv2 rows). Over the step exactly 4 x the heads'
// activation less (apply and bias passes), in the BN forward pass only.
TEST(StepModel, FuseHeadBnRows) {
    const double n = 2.0 * 32 * 64 * 64;  // one head's activation: (2,32,64,64)
    for (bool merge : {false, true}) {
        model::NetShape ps = small(), fs = small();
        ps.merge_heads = fs.merge_heads = merge;
        fs.fuse_head_bn = true;
        const std::vector<StepModelRow> plain = tools::step_model(ps), fused = tools::step_model(fs);
        ASSERT_EQ(plain.size(), fused.size());
        const std::string c1 = merge ? "dual_head.conv1" : "dual_head.offset.conv1";
        const double c1_out = merge ? 4 * n : n;
        EXPECT_DOUBLE_EQ(row(plain, c1).at(StepPart::NormFwd).bytes - row(fused, c1).at(StepPart::NormFwd).bytes,
                         4 * c1_out * 2)
            << c1;
        for (const char* h : {"heatmap_gap", "heatmap_piece", "offset", "angle"}) {
            const std::string c2 = std::string("dual_head.") + h + ".conv2";
            expect_prologue_row(row(plain, c2), row(fused, c2), n, kern::Act::Relu);
        }
        expect_only_the_apply_passes_go(plain, fused, fs);
    }
}

// NetShape::fuse_up_bn: each up path (conv_first) loses its upsample forward pass, and its four BN passes that
// read the upsampled tensor read the conv output instead (2 x (hi - lo) elements less forward and backward),
// doing the upsample's 7 FLOPs an element each time; nothing else changes.
TEST(StepModel, FuseUpBnRows) {
    const model::NetShape ps = small(model::UpOrder::ConvFirst);
    model::NetShape fs = ps;
    fs.fuse_up_bn = true;
    const std::vector<StepModelRow> plain = tools::step_model(ps), fused = tools::step_model(fs);
    ASSERT_EQ(plain.size(), fused.size());
    int paths = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
        const StepModelRow &p = plain[i], &f = fused[i];
        EXPECT_EQ(p.name, f.name);
        const bool up = p.kind == "conv 1x1 up path" && p.at(StepPart::OtherFwd).bytes > 0;
        if (!up) {
            for (int k = 0; k < static_cast<int>(StepPart::kCount); ++k)
                EXPECT_DOUBLE_EQ(f.at(static_cast<StepPart>(k)).bytes, p.at(static_cast<StepPart>(k)).bytes) << p.name;
            continue;
        }
        ++paths;
        // The upsample forward's bytes: lo read, hi written (upsample_forward_cost: 7 FLOPs an output element).
        const double ub = p.at(StepPart::OtherFwd).bytes, uf = p.at(StepPart::OtherFwd).simt_flops;
        const double hi = uf / 7, lo = ub / 2 - hi;  // bf16 elements
        EXPECT_DOUBLE_EQ(f.at(StepPart::OtherFwd).bytes, 0) << p.name;
        EXPECT_DOUBLE_EQ(p.at(StepPart::NormFwd).bytes - f.at(StepPart::NormFwd).bytes, 2 * (hi - lo) * 2) << p.name;
        EXPECT_DOUBLE_EQ(p.at(StepPart::NormBwd).bytes - f.at(StepPart::NormBwd).bytes, 2 * (hi - lo) * 2) << p.name;
        EXPECT_DOUBLE_EQ(f.at(StepPart::NormFwd).simt_flops, p.at(StepPart::NormFwd).simt_flops + 2 * uf) << p.name;
        EXPECT_DOUBLE_EQ(f.at(StepPart::OtherBwd).bytes, p.at(StepPart::OtherBwd).bytes) << p.name;
    }
    EXPECT_EQ(paths, 10);
}

TEST(StepModel, FloorSumsEveryPassBoundOnItsOwn) {
    tools::DevicePeaks pk;
    pk.device = "test";
    pk.tensor_tflops = 1000;  // 1e12 FLOPs: 1 ms
    pk.simt_tflops = 50;      // 5e10 FLOPs: 1 ms
    pk.hbm_gbps = 1000;       // 1e9 bytes: 1 ms
    std::vector<StepModelRow> rows(2);
    rows[0].name = "a";
    rows[0].kind = "conv 3x3 dense";
    rows[0].at(StepPart::ConvFwd) = {1e12, 0, 1e9};  // 1 ms either way
    rows[0].at(StepPart::NormFwd) = {0, 0, 2e9};      // 2 ms of memory
    rows[1].name = "b";
    rows[1].kind = "loss";
    rows[1].at(StepPart::Step) = {0, 5e10, 1e6};  // 1 ms of compute, 0.001 ms of memory
    const tools::StepFloor f = tools::step_floor(rows, pk);
    EXPECT_DOUBLE_EQ(f.floor_ms, 4.0);
    EXPECT_DOUBLE_EQ(f.memory_ms, 3.001);
    EXPECT_DOUBLE_EQ(f.compute_ms, 2.0);
    ASSERT_EQ(f.by_kind.size(), 2u);
    EXPECT_EQ(f.by_kind[0].name, "conv 3x3 dense");
    EXPECT_DOUBLE_EQ(f.by_kind[0].floor_ms, 3.0);
    EXPECT_EQ(f.by_kind[1].name, "loss");
    EXPECT_DOUBLE_EQ(f.by_kind[1].floor_ms, 1.0);
    EXPECT_DOUBLE_EQ(f.by_part[static_cast<int>(StepPart::NormFwd)].floor_ms, 2.0);
    EXPECT_EQ(f.by_part[static_cast<int>(StepPart::ConvDgrad)].rows, 0);
    rows[1].kind = "matmul";
    SF_EXPECT_ERROR(tools::step_floor(rows, pk), "row b", "unknown class 'matmul'");
}

tools::PlanArgs parse(const std::vector<std::string>& args) {
    bool help = false;
    const tools::PlanArgs a = tools::parse_plan_args(args, &help);
    EXPECT_FALSE(help);
    return a;
}

TEST(PlanRoofline, DocumentAddsUpAndNamesItsPeaks) {
    const tools::PlanArgs a = parse({"--roofline", "--height", "128", "--width", "256", "--batch", "4"});
    const nlohmann::json r = tools::plan_roofline_json(a);
    EXPECT_EQ(r["peaks"]["entry"], "H100 SXM");
    EXPECT_EQ(r["peaks"]["hbm_gbps"].get<double>(), 3350);
    const double floor = r["floor_ms"].get<double>();
    double kinds = 0, parts = 0, share = 0, bytes = 0;
    for (const nlohmann::json& g : r["by_kind"]) {
        kinds += g["floor_ms"].get<double>();
        share += g["share"].get<double>();
        bytes += g["bytes"].get<double>();
    }
    for (const nlohmann::json& g : r["by_part"]) parts += g["floor_ms"].get<double>();
    EXPECT_NEAR(kinds, floor, 1e-9 * floor);
    EXPECT_NEAR(parts, floor, 1e-9 * floor);
    EXPECT_NEAR(share, 1.0, 1e-9);
    EXPECT_NEAR(bytes / 4, r["per_sample"]["bytes"].get<double>(), 1e-6 * bytes);
    EXPECT_NEAR(r["samples_per_s_bound"].get<double>(), 4 / (floor * 1e-3), 1e-9 * 4 / (floor * 1e-3));
    EXPECT_GE(floor, r["memory_ms"].get<double>());
    EXPECT_GE(floor, r["compute_ms"].get<double>());
    const std::string t = tools::plan_roofline_text(r);
    for (const char* k : {"H100 SXM", "by class", "by pass", "conv 3x3 depthwise", "bn+act bwd", "samples/s"})
        EXPECT_NE(t.find(k), std::string::npos) << k << "\n" << t;
    // ConvFirst moves less (OPTIMIZATION_LOG entry 1); the CPU backend's fp32 activations move more.
    const nlohmann::json cf = tools::plan_roofline_json(
        parse({"--roofline", "--height", "128", "--width", "256", "--batch", "4", "--up-order", "conv_first"}));
    EXPECT_LT(cf["per_sample"]["bytes"].get<double>(), r["per_sample"]["bytes"].get<double>());
    const nlohmann::json cpu = tools::plan_roofline_json(
        parse({"--roofline", "--height", "128", "--width", "256", "--batch", "4", "--backend", "cpu"}));
    EXPECT_GT(cpu["per_sample"]["bytes"].get<double>(), 1.5 * r["per_sample"]["bytes"].get<double>());
}

TEST(PlanRoofline, PeaksFromDeviceCeilingsAndOverrides) {
    EXPECT_EQ(tools::plan_roofline_peaks(parse({"--roofline", "--device", "NVIDIA H200"})).hbm_gbps, 4800);
    const std::string path = ::testing::TempDir() + "sf_plan_roofline_ceilings.json";
    sftest::write_ceilings(path, sftest::measured_h100_ceilings());
    tools::DevicePeaks p = tools::plan_roofline_peaks(parse({"--roofline", "--ceilings", path}));
    EXPECT_EQ(p.hbm_gbps, 2950.5);
    EXPECT_EQ(p.tensor_tflops, 733.25);
    EXPECT_EQ(p.simt_tflops, 67);  // not measured: the datasheet's
    p = tools::plan_roofline_peaks(parse({"--roofline", "--ceilings", path, "--peak-gbps", "3000"}));
    EXPECT_EQ(p.hbm_gbps, 3000);
    EXPECT_EQ(p.tensor_tflops, 733.25);
    const nlohmann::json r =
        tools::plan_roofline_json(parse({"--roofline", "--batch", "2", "--height", "64", "--width", "128",
                                         "--ceilings", path}));
    EXPECT_EQ(r["peaks"]["hbm_gbps"].get<double>(), 2950.5);
}

TEST(PlanRoofline, BadArgumentsAreNamed) {
    bool help = false;
    SF_EXPECT_ERROR(tools::plan_roofline_json(parse({"--roofline", "--device", "Some Future GPU"})),
                    "peaks of \"Some Future GPU\" are unknown", "--peak-tflops and --peak-gbps");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--peak-gbps", "3000"}, &help), "give --roofline too");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--device", "H200"}, &help), "give --roofline too");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--roofline", "--peak-tflops", "-1"}, &help), "--peak-tflops");
    SF_EXPECT_ERROR(tools::plan_roofline_peaks(parse({"--roofline", "--ceilings", "/nonexistent/c.json"})),
                    "/nonexistent/c.json");
    // Known device, explicit peaks: the overrides are used and said.
    const tools::DevicePeaks p =
        tools::plan_roofline_peaks(parse({"--roofline", "--device", "H100", "--peak-tflops", "500"}));
    EXPECT_EQ(p.tensor_tflops, 500);
    EXPECT_NE(p.source.find("tensor peak given"), std::string::npos) << p.source;
}

}  // namespace
