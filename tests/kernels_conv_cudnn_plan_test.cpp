// The pure parts of the cuDNN convolution layer (kernels/conv_cudnn.h, runtime/cudnn_graph.h), on the
// CPU: plan keys (equality, hashing, names), the dims/strides arrays handed to cuDNN for NHWC / KRSC
// tensors, scratch sizes and the workspace layout, the add kernels' launch geometry, the
// accumulation variants, and the errors raised before any device work (CPU Exec).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "runtime/cudnn_graph.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::ConvAccum;
using kern::ConvOp;
using kern::ConvPlanKey;
using kern::ConvPolicy;
using kern::ConvShape;

ConvShape shape(int n, int h, int w, int cin, int cout, int k, int stride, int groups = 1) {
    return ConvShape{n, h, w, cin, cout, k, stride, (k - 1) / 2, groups, false};
}

std::vector<int64_t> v4(const int64_t (&a)[4]) { return {a[0], a[1], a[2], a[3]}; }

TEST(KernelsConvCudnnPlan, KeyEquality) {
    const ConvPolicy pol;
    const ConvShape s = shape(2, 16, 32, 32, 64, 3, 2);
    const ConvPlanKey a = kern::conv_plan_key(ConvOp::Fprop, s, pol);
    EXPECT_TRUE(a == kern::conv_plan_key(ConvOp::Fprop, s, pol));
    ConvShape with_bias = s;
    with_bias.bias = true;  // the bias is the caller's: same plan
    EXPECT_TRUE(a == kern::conv_plan_key(ConvOp::Fprop, with_bias, pol));
    EXPECT_FALSE(a.shape.bias);

    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Dgrad, s, pol));
    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Wgrad, s, pol));
    int ConvShape::*fields[] = {&ConvShape::n,    &ConvShape::h, &ConvShape::w,      &ConvShape::cin,
                                &ConvShape::cout, &ConvShape::k, &ConvShape::stride, &ConvShape::pad};
    for (int ConvShape::*f : fields) {
        ConvShape t = s;
        t.*f += 1;
        EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Fprop, t, pol));
    }
    ConvShape g = s;
    g.groups = 32;
    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Fprop, g, pol));

    ConvPolicy p2 = pol;
    p2.deterministic = true;
    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Fprop, s, p2));
    p2 = pol;
    p2.autotune = false;
    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Fprop, s, p2));
    p2 = pol;
    p2.max_workspace = 1u << 20;
    EXPECT_TRUE(a != kern::conv_plan_key(ConvOp::Fprop, s, p2));
    p2 = pol;
    p2.autotune_iters = 10;  // how long we time does not select a different kind of plan
    EXPECT_TRUE(a == kern::conv_plan_key(ConvOp::Fprop, s, p2));
}

TEST(KernelsConvCudnnPlan, KeyHashDistinct) {
    std::vector<ConvShape> shapes = {shape(2, 16, 32, 2, 32, 3, 2),     shape(2, 8, 16, 32, 32, 3, 2),
                                     shape(2, 8, 16, 32, 64, 1, 1),     shape(2, 8, 16, 64, 32, 1, 1),
                                     shape(2, 8, 16, 128, 128, 3, 1),   shape(2, 8, 16, 128, 64, 3, 1),
                                     shape(2, 8, 16, 64, 64, 3, 1, 64), shape(2, 8, 16, 64, 64, 3, 2, 64),
                                     shape(4, 8, 16, 64, 64, 3, 1, 64), shape(2, 2, 4, 512, 512, 3, 1, 512)};
    std::vector<ConvPolicy> pols(4);
    pols[1].deterministic = true;
    pols[2].autotune = false;
    pols[3].max_workspace = 0;
    std::unordered_map<ConvPlanKey, int, kern::ConvPlanKeyHash> map;
    std::set<size_t> hashes;
    int n = 0;
    for (ConvOp op : {ConvOp::Fprop, ConvOp::Dgrad, ConvOp::Wgrad})
        for (const ConvShape& s : shapes)
            for (const ConvPolicy& p : pols) {
                const ConvPlanKey k = kern::conv_plan_key(op, s, p);
                EXPECT_EQ(kern::ConvPlanKeyHash{}(k), kern::ConvPlanKeyHash{}(kern::conv_plan_key(op, s, p)));
                hashes.insert(kern::ConvPlanKeyHash{}(k));
                map.emplace(k, n++);
            }
    EXPECT_EQ(n, 3 * 10 * 4);
    EXPECT_EQ(map.size(), size_t(n));     // all keys distinct
    EXPECT_EQ(hashes.size(), size_t(n));  // and no hash collision among them
    EXPECT_EQ(map.at(kern::conv_plan_key(ConvOp::Wgrad, shapes[4], pols[2])), 2 * 40 + 4 * 4 + 2);
}

TEST(KernelsConvCudnnPlan, KeyToString) {
    ConvPolicy p;
    p.deterministic = true;
    EXPECT_EQ(kern::conv_plan_key(ConvOp::Wgrad, shape(2, 16, 32, 32, 64, 3, 2), p).to_string(),
              "wgrad n2 16x32 c32->64 k3 s2 p1 g1 det tuned ws<=256MiB top4");
    p = ConvPolicy{};
    p.autotune = false;
    p.max_workspace = 0;
    EXPECT_EQ(kern::conv_plan_key(ConvOp::Fprop, shape(1, 8, 8, 64, 64, 3, 1, 64), p).to_string(),
              "fprop n1 8x8 c64->64 k3 s1 p1 g64 nondet heur ws<=inf top4");
    p.max_workspace = 1000;
    EXPECT_EQ(kern::conv_plan_key(ConvOp::Dgrad, shape(3, 4, 6, 128, 256, 1, 1), p).to_string(),
              "dgrad n3 4x6 c128->256 k1 s1 p0 g1 nondet heur ws<=1000B top4");
    EXPECT_STREQ(kern::conv_op_name(ConvOp::Dgrad), "dgrad");
    EXPECT_EQ(kern::conv_plan_key(ConvOp::Dgrad, shape(3, 4, 6, 128, 256, 1, 1), p, true).to_string(),
              "dgrad-overwrite n3 4x6 c128->256 k1 s1 p0 g1 nondet heur ws<=1000B top4");
}

// The dgrad modes are distinct plans: distinct keys (equality, hash, string), so the plan cache and
// the process-wide store never hand one mode's plan to the other; only dgrad has the mode.
TEST(KernelsConvCudnnPlan, DgradModesAreDistinctKeys) {
    const ConvPolicy p;
    const ConvShape s = shape(2, 8, 16, 32, 64, 3, 1);
    const kern::ConvPlanKey acc = kern::conv_plan_key(ConvOp::Dgrad, s, p),
                            ovw = kern::conv_plan_key(ConvOp::Dgrad, s, p, true);
    EXPECT_FALSE(acc.overwrite);
    EXPECT_TRUE(ovw.overwrite);
    EXPECT_NE(acc, ovw);
    EXPECT_NE(kern::ConvPlanKeyHash{}(acc), kern::ConvPlanKeyHash{}(ovw));
    EXPECT_NE(acc.to_string(), ovw.to_string());
    EXPECT_EQ(acc, kern::conv_plan_key(ConvOp::Dgrad, s, p, false));
    const kern::ConvPlanStoreKey sa{acc, 0, 91900}, so{ovw, 0, 91900};
    EXPECT_FALSE(sa == so);
    kern::ConvPlanStore store;
    bool built = false;
    store.get_or_build(
        sa,
        [] {
            return kern::ConvPlanChoice{"a", ConvAccum::InPlace, 1.0, 2};
        },
        &built);
    EXPECT_TRUE(built);
    const kern::ConvPlanChoice c = store.get_or_build(
        so,
        [] {
            return kern::ConvPlanChoice{"o", ConvAccum::Overwrite, 0.5, 1};
        },
        &built);
    EXPECT_TRUE(built);  // the overwrite key is not answered by the accumulate key's choice
    EXPECT_EQ(c.accum, ConvAccum::Overwrite);
    EXPECT_EQ(store.size(), 2u);
    for (ConvOp op : {ConvOp::Fprop, ConvOp::Wgrad}) {
        SF_EXPECT_ERROR(kern::conv_plan_key(op, s, p, true), "only dgrad has an overwrite mode",
                        kern::conv_op_name(op));
        SF_EXPECT_ERROR(kern::conv_accum_variants(op, true), "only dgrad has an overwrite mode");
        SF_EXPECT_ERROR(kern::conv_accum_tier0(op, true), "only dgrad has an overwrite mode");
    }
}

// A launch in a mode whose plan was not prepared is refused, naming both keys and what to do.
TEST(KernelsConvCudnnPlan, UnpreparedDgradModeIsRefused) {
    const ConvShape s = shape(2, 8, 16, 32, 64, 3, 1);
    const kern::ConvPlanKey acc = kern::conv_plan_key(ConvOp::Dgrad, s, {}),
                            ovw = kern::conv_plan_key(ConvOp::Dgrad, s, {}, true);
    kern::conv_check_dgrad_mode(acc, true);  // the prepared mode passes
    kern::conv_check_dgrad_mode(ovw, false);
    SF_EXPECT_ERROR(kern::conv_check_dgrad_mode(acc, false), "overwrite mode was asked",
                    "only the accumulate mode was prepared", "dgrad-overwrite n2 8x16 c32->64", "ConvUse");
    SF_EXPECT_ERROR(kern::conv_check_dgrad_mode(ovw, true), "accumulate mode was asked",
                    "only the overwrite mode was prepared");
    SF_EXPECT_ERROR(kern::conv_check_dgrad_mode(kern::conv_plan_key(ConvOp::Wgrad, s, {}), true), "no dgrad key");
}

TEST(KernelsConvCudnnPlan, CacheNeedsCuda) {
    SF_EXPECT_ERROR(kern::ConvPlanCache(rt::Exec::cpu(), ConvPolicy{}), "needs a CUDA Exec", "cpu");
    SF_EXPECT_ERROR(kern::conv_add_bf16(rt::Exec::cpu(), nullptr, nullptr, 8), "conv_add_bf16", "cpu");
    SF_EXPECT_ERROR(kern::conv_add_f32(rt::Exec::cpu(), nullptr, nullptr, 8), "conv_add_f32", "cpu");
    SF_EXPECT_ERROR(kern::conv_add_f32_bf16(rt::Exec::cpu(), nullptr, nullptr, 8), "conv_add_f32_bf16", "cpu");
}

TEST(KernelsConvCudnnPlan, ChannelsLastStrides) {
    EXPECT_EQ(rt::channels_last_strides({2, 3, 4, 5}), (std::vector<int64_t>{60, 1, 15, 3}));
    EXPECT_EQ(rt::channels_last_strides({2, 3, 4, 5, 6}), (std::vector<int64_t>{360, 1, 90, 18, 3}));
    EXPECT_EQ(rt::channels_last_strides({7, 1, 1}), (std::vector<int64_t>{1, 1, 1}));
    SF_EXPECT_ERROR(rt::channels_last_strides({2, 3}), "need (N, C, spatial...)");
    SF_EXPECT_ERROR(rt::channels_last_strides({2, 0, 4, 5}), "dim 1 is 0");
}

TEST(KernelsConvCudnnPlan, CudnnDimsStemConv) {
    // stem conv1: x (2,16,32,2) NHWC, w (32,3,3,2) KRSC, stride 2 pad 1 -> y (2,8,16,32).
    const kern::ConvCudnnDims d = kern::conv_cudnn_dims(shape(2, 16, 32, 2, 32, 3, 2));
    EXPECT_EQ(v4(d.x_dims), (std::vector<int64_t>{2, 2, 16, 32}));
    EXPECT_EQ(v4(d.x_strides), (std::vector<int64_t>{1024, 1, 64, 2}));
    EXPECT_EQ(v4(d.w_dims), (std::vector<int64_t>{32, 2, 3, 3}));
    EXPECT_EQ(v4(d.w_strides), (std::vector<int64_t>{18, 1, 6, 2}));
    EXPECT_EQ(v4(d.y_dims), (std::vector<int64_t>{2, 32, 8, 16}));
    EXPECT_EQ(v4(d.y_strides), (std::vector<int64_t>{4096, 1, 512, 32}));
    EXPECT_EQ(d.pad[0], 1);
    EXPECT_EQ(d.pad[1], 1);
    EXPECT_EQ(d.stride[0], 2);
    EXPECT_EQ(d.stride[1], 2);
    EXPECT_EQ(d.dilation[0], 1);
    EXPECT_EQ(d.dilation[1], 1);
    // The generic helper agrees with the hand-written arrays.
    EXPECT_EQ(rt::channels_last_strides(v4(d.x_dims)), v4(d.x_strides));
    EXPECT_EQ(rt::channels_last_strides(v4(d.w_dims)), v4(d.w_strides));
    EXPECT_EQ(rt::channels_last_strides(v4(d.y_dims)), v4(d.y_strides));
}

TEST(KernelsConvCudnnPlan, CudnnDimsDepthwiseAndPointwise) {
    // Depthwise 3x3 stride 2, C = 64: w is (64, 1, 3, 3); groups follow from x's C over w's C.
    kern::ConvCudnnDims d = kern::conv_cudnn_dims(shape(2, 16, 32, 64, 64, 3, 2, 64));
    EXPECT_EQ(v4(d.x_strides), (std::vector<int64_t>{16 * 32 * 64, 1, 32 * 64, 64}));
    EXPECT_EQ(v4(d.w_dims), (std::vector<int64_t>{64, 1, 3, 3}));
    EXPECT_EQ(v4(d.w_strides), (std::vector<int64_t>{9, 1, 3, 1}));
    EXPECT_EQ(v4(d.y_dims), (std::vector<int64_t>{2, 64, 8, 16}));
    // Odd sizes with stride 2: P = (15 + 2 - 3) / 2 + 1 = 8, Q = (9 + 2 - 3) / 2 + 1 = 5.
    d = kern::conv_cudnn_dims(shape(1, 15, 9, 32, 32, 3, 2, 32));
    EXPECT_EQ(v4(d.y_dims), (std::vector<int64_t>{1, 32, 8, 5}));
    EXPECT_EQ(v4(d.y_strides), (std::vector<int64_t>{8 * 5 * 32, 1, 5 * 32, 32}));
    // 1x1, 128 -> 256, no padding.
    d = kern::conv_cudnn_dims(shape(2, 4, 8, 128, 256, 1, 1));
    EXPECT_EQ(v4(d.w_dims), (std::vector<int64_t>{256, 128, 1, 1}));
    EXPECT_EQ(v4(d.w_strides), (std::vector<int64_t>{128, 1, 128, 128}));
    EXPECT_EQ(v4(d.y_dims), (std::vector<int64_t>{2, 256, 4, 8}));
    EXPECT_EQ(d.pad[0], 0);
    // Invalid shapes are refused before anything reaches cuDNN.
    SF_EXPECT_ERROR(kern::conv_cudnn_dims(shape(2, 4, 8, 30, 64, 3, 1, 4)), "groups");
}

TEST(KernelsConvCudnnPlan, AccumVariants) {
    EXPECT_EQ(kern::conv_accum_variants(ConvOp::Fprop), std::vector<ConvAccum>{ConvAccum::Overwrite});
    EXPECT_EQ(kern::conv_accum_variants(ConvOp::Dgrad),
              (std::vector<ConvAccum>{ConvAccum::InPlace, ConvAccum::ScratchBf16}));
    EXPECT_EQ(kern::conv_accum_variants(ConvOp::Wgrad),
              (std::vector<ConvAccum>{ConvAccum::InPlace, ConvAccum::ScratchF32, ConvAccum::ScratchBf16}));
    EXPECT_EQ(kern::conv_accum_tier0(ConvOp::Fprop), size_t(1));
    EXPECT_EQ(kern::conv_accum_tier0(ConvOp::Dgrad), size_t(2));
    EXPECT_EQ(kern::conv_accum_tier0(ConvOp::Wgrad), size_t(3));
    // The overwrite mode: beta = 0 into dx first; the beta = 1 plan (dx zeroed first) only when no
    // beta = 0 engine exists. Neither needs scratch.
    EXPECT_EQ(kern::conv_accum_variants(ConvOp::Dgrad, true),
              (std::vector<ConvAccum>{ConvAccum::Overwrite, ConvAccum::InPlace}));
    EXPECT_EQ(kern::conv_accum_tier0(ConvOp::Dgrad, true), size_t(1));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Dgrad, ConvAccum::Overwrite, shape(2, 8, 16, 32, 64, 3, 1)), 0u);
    EXPECT_STREQ(kern::conv_accum_name(ConvAccum::InPlace), "in-place(beta=1)");
    EXPECT_STREQ(kern::conv_accum_name(ConvAccum::ScratchF32), "scratch-fp32+add");
}

TEST(KernelsConvCudnnPlan, ScratchBytes) {
    const ConvShape s = shape(2, 16, 32, 32, 64, 3, 2);  // x 2*16*32*32 = 32768, w 64*9*32 = 18432
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Fprop, ConvAccum::Overwrite, s), size_t(0));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Dgrad, ConvAccum::InPlace, s), size_t(0));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Wgrad, ConvAccum::InPlace, s), size_t(0));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Dgrad, ConvAccum::ScratchBf16, s), size_t(32768 * 2));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Wgrad, ConvAccum::ScratchF32, s), size_t(18432 * 4));
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Wgrad, ConvAccum::ScratchBf16, s), size_t(18432 * 2));
    const ConvShape dw = shape(2, 8, 16, 128, 128, 3, 1, 128);  // w 128*9*1
    EXPECT_EQ(kern::conv_scratch_bytes(ConvOp::Wgrad, ConvAccum::ScratchF32, dw), size_t(128 * 9 * 4));
    SF_EXPECT_ERROR(kern::conv_scratch_bytes(ConvOp::Fprop, ConvAccum::ScratchBf16, s), "fprop has no scratch");
    SF_EXPECT_ERROR(kern::conv_scratch_bytes(ConvOp::Dgrad, ConvAccum::ScratchF32, s), "dgrad scratch is bf16");
}

TEST(KernelsConvCudnnPlan, WorkspaceLayout) {
    using kern::conv_workspace_layout;
    EXPECT_EQ(conv_workspace_layout(0, 0).total, size_t(0));
    EXPECT_EQ(conv_workspace_layout(0, 64).scratch_offset, size_t(0));
    EXPECT_EQ(conv_workspace_layout(0, 64).total, size_t(64));
    EXPECT_EQ(conv_workspace_layout(1000, 0).scratch_offset, size_t(1024));
    EXPECT_EQ(conv_workspace_layout(1000, 0).total, size_t(1000));  // no scratch: cuDNN's bytes only
    EXPECT_EQ(conv_workspace_layout(1000, 64).total, size_t(1088));
    EXPECT_EQ(conv_workspace_layout(256, 10).scratch_offset, size_t(256));
    EXPECT_EQ(conv_workspace_layout(256, 10).total, size_t(266));
    EXPECT_EQ(conv_workspace_layout(257, 10).total, size_t(522));
    // The workspace to reserve is the max over plans (they share offset 0): a big cuDNN workspace
    // with no scratch vs a small one with scratch.
    const size_t a = conv_workspace_layout(5000, 0).total, b = conv_workspace_layout(100, 4096).total;
    EXPECT_EQ(b, size_t(256 + 4096));
    EXPECT_EQ(std::max(a, b), size_t(5000));
    static_assert(kern::conv_workspace_layout(300, 1).total == 513, "constexpr layout");
}

TEST(KernelsConvCudnnPlan, AddGeometry) {
    using kern::conv_add_geometry;
    kern::ConvAddGeometry g = conv_add_geometry(0, 8);
    EXPECT_EQ(g.vectors, size_t(0));
    EXPECT_EQ(g.tail, size_t(0));
    EXPECT_EQ(g.blocks, 1);
    g = conv_add_geometry(7, 8);
    EXPECT_EQ(g.vectors, size_t(0));
    EXPECT_EQ(g.tail, size_t(7));
    EXPECT_EQ(g.blocks, 1);
    g = conv_add_geometry(8 * 257 + 3, 8);
    EXPECT_EQ(g.vectors, size_t(257));
    EXPECT_EQ(g.tail, size_t(3));
    EXPECT_EQ(g.blocks, 2);
    g = conv_add_geometry(1001, 4);
    EXPECT_EQ(g.vectors, size_t(250));
    EXPECT_EQ(g.tail, size_t(1));
    EXPECT_EQ(g.blocks, 1);
    // Largest dgrad scratch of the model (N=128, 128x256, C=32 bf16): capped, grid-stride beyond.
    g = conv_add_geometry(size_t(128) * 128 * 256 * 32, 8);
    EXPECT_EQ(g.vectors, size_t(128) * 128 * 256 * 4);
    EXPECT_EQ(g.tail, size_t(0));
    EXPECT_EQ(g.blocks, kern::kConvAddMaxBlocks);
    // Every element is covered exactly once: vectors * vec + tail = n, tail < vec <= threads.
    for (size_t n : {1u, 9u, 4095u, 65536u, 1000003u})
        for (int vec : {4, 8}) {
            g = conv_add_geometry(n, vec);
            EXPECT_EQ(g.vectors * vec + g.tail, n);
            EXPECT_LT(g.tail, size_t(vec));
            EXPECT_GE(g.blocks, 1);
            EXPECT_LE(g.blocks, kern::kConvAddMaxBlocks);
        }
}

// cuDNN 9 finalizes tensor, convolution and operation descriptors without a device: every shape
// class of the model, every op and accumulation variant (bf16 / fp32 dw, beta 0 / 1) must be accepted
// there, so attribute types, counts, dims/strides and the group split are checked on the CPU.
TEST(KernelsConvCudnnPlan, OperationsFinalizeWithoutDevice) {
    const ConvShape shapes[] = {shape(2, 16, 32, 2, 32, 3, 2),       shape(2, 16, 32, 8, 32, 3, 2),
                                shape(2, 8, 16, 32, 32, 3, 2),       shape(2, 8, 16, 32, 64, 1, 1),
                                shape(2, 2, 4, 512, 256, 1, 1),      shape(2, 8, 16, 128, 64, 3, 1),
                                shape(2, 16, 32, 32, 32, 3, 1, 32),  shape(2, 7, 9, 128, 128, 3, 2, 128),
                                shape(2, 2, 4, 512, 512, 3, 1, 512), shape(128, 256, 512, 2, 32, 3, 2)};
    int checked = 0;
    for (const ConvShape& s : shapes)
        for (ConvOp op : {ConvOp::Fprop, ConvOp::Dgrad, ConvOp::Wgrad})
            for (bool overwrite : {false, true}) {
                if (overwrite && op != ConvOp::Dgrad) continue;
                for (ConvAccum a : kern::conv_accum_variants(op, overwrite)) {
                    std::string why = "unset";
                    EXPECT_TRUE(kern::conv_cudnn_operation_ok(s, op, a, &why))
                        << kern::conv_plan_key(op, s, {}, overwrite).to_string() << " " << kern::conv_accum_name(a)
                        << ": " << why;
                    ++checked;
                }
            }
    EXPECT_EQ(checked, 10 * 8);  // fprop 1, dgrad 2 + 2 (overwrite: the beta = 0 graph), wgrad 3
    SF_EXPECT_ERROR(kern::conv_cudnn_operation_ok(shapes[0], ConvOp::Fprop, ConvAccum::InPlace, nullptr),
                    "is not a variant of fprop");
    SF_EXPECT_ERROR(kern::conv_cudnn_operation_ok(shapes[0], ConvOp::Dgrad, ConvAccum::ScratchF32, nullptr),
                    "is not a variant of dgrad");
}

TEST(KernelsConvCudnnPlan, NoteNames) {
    EXPECT_STREQ(rt::cudnn_numerical_note_name(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC), "NONDETERMINISTIC");
    EXPECT_STREQ(rt::cudnn_behavior_note_name(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION), "RUNTIME_COMPILATION");
    EXPECT_STREQ(rt::cudnn_knob_name(CUDNN_KNOB_TYPE_TILE_SIZE), "TILE_SIZE");
    EXPECT_STREQ(rt::cudnn_heur_mode_name(CUDNN_HEUR_MODE_FALLBACK), "fallback");
    rt::CudnnEngineConfig e;  // description of a config without a descriptor (pure formatting)
    e.engine_id = 12;
    e.knobs = {{CUDNN_KNOB_TYPE_TILE_SIZE, 3}, {CUDNN_KNOB_TYPE_STAGES, 4}};
    e.numerical_notes = {CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
    e.behavior_notes = {CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION};
    EXPECT_EQ(e.identity(), "engine 12 knobs{TILE_SIZE=3,STAGES=4}");
    EXPECT_EQ(e.describe(), "engine 12 knobs{TILE_SIZE=3,STAGES=4} notes{TENSOR_CORE,RUNTIME_COMPILATION} [heurA]");
    EXPECT_TRUE(e.has_note(CUDNN_NUMERICAL_NOTE_TENSOR_CORE));
    EXPECT_FALSE(e.has_note(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC));
}

}  // namespace
