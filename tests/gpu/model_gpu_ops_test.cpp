// model::GpuOps with autotuning on depthwise shapes (model/gpu_ops.cpp): every variant of the custom
// depthwise kernels valid for the shape is timed per direction (gather: kern::kDwVariants, wgrad:
// kern::kDwWgradVariants; the dgrad in each mode the step runs, accumulate and overwrite, with a choice
// per mode), the fastest kept and listed by describe() (also when cuDNN was faster and runs the shape); when the
// custom kernels run, the convolutions GpuOps runs give the same bits as the default variant called
// directly (the variants' documented property) and the same filter gradient as the direct wgrad;
// when cuDNN runs (under the CPU emulation it can be faster), the same values to rounding. A shape
// planned with a BN prologue (the fused LiteBlock) also has its prologue forward variants timed and
// the fastest run by conv_forward_prologue, bitwise equal to variant 0's prologue forward.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bn_act_cuda.h"
#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/planner.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"
#include "tests/support/gpu_buffers.h"

namespace {

using sftest::dw_shape;

using kern::bf16;

using Dev = sftest::DeviceBuffer;

// The numbers of "[0.0123 - 0.0456 ...]" after `key` in line: -1 for "-".
std::vector<double> variant_times(const std::string& line, const std::string& key) {
    std::vector<double> ms;
    const size_t at = line.find(key);
    if (at == std::string::npos) return ms;
    const size_t open = line.find('[', at), close = line.find(']', at);
    if (open == std::string::npos || close == std::string::npos) return ms;
    const std::string list = line.substr(open + 1, close - open - 1);
    size_t i = 0;
    while (i < list.size()) {
        const size_t sp = list.find(' ', i);
        const std::string tok = list.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
        ms.push_back(tok == "-" ? -1.0 : std::atof(tok.c_str()));
        if (sp == std::string::npos) break;
        i = sp + 1;
    }
    return ms;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// GpuOps autotuning (one run per candidate) over `uses`, with its workspace bound; describe() printed.
struct Autotuned {
    model::GpuOps ops;
    Dev ws;
    std::vector<std::string> lines;
    Autotuned(const rt::CudaContext& ctx, const std::vector<model::ConvUse>& uses, bool dw_variants = true,
              bool dw_fused_bwd = false)
        : ops(ctx.exec(), policy(dw_variants, dw_fused_bwd)), ws(prepared(ops, uses)) {
        ops.bind_workspace(ws.p, ops.workspace_bytes());
        lines = ops.describe();
        for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
    }
    static kern::ConvPolicy policy(bool dw_variants, bool dw_fused_bwd) {
        kern::ConvPolicy p;
        p.autotune = true;
        p.autotune_iters = 1;
        p.max_candidates = 1;
        p.dw_variants = dw_variants;
        p.dw_fused_bwd = dw_fused_bwd;
        return p;
    }
    static size_t prepared(model::GpuOps& o, const std::vector<model::ConvUse>& uses) {
        o.prepare(uses);
        return o.workspace_bytes();
    }
};

// The two depthwise shapes both tests plan (stride 1 and 2, 64- and 40-channel), with a BN prologue or not.
std::vector<model::ConvUse> dw_uses(bool prologue) {
    std::vector<model::ConvUse> uses;
    for (const kern::ConvShape& s : {dw_shape(2, 16, 32, 64, 1), dw_shape(2, 15, 33, 40, 2)}) {
        model::ConvUse u;
        u.shape = s;
        u.dgrad = true;
        u.dgrad_accumulate = true;
        u.bn_prologue = prologue;
        u.prologue_act = prologue ? kern::Act::Silu : kern::Act::None;
        uses.push_back(u);
    }
    return uses;
}

TEST(ModelGpuOpsGpu, DepthwiseVariantsAutotunedAndBitwiseEqual) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    std::vector<model::ConvUse> uses = dw_uses(false);
    uses[0].dgrad_overwrite = true;  // the first shape's dgrad runs in both modes: a choice per mode
    Autotuned tuned(ctx, uses);
    const model::GpuOps& ops = tuned.ops;
    const std::vector<std::string>& lines = tuned.lines;

    // The variants' names, once, in index order.
    std::string names_line;
    for (const std::string& l : lines)
        if (l.rfind("dwconv variant names: gather [", 0) == 0) names_line = l;
    ASSERT_FALSE(names_line.empty()) << "no 'dwconv variant names:' line";
    for (int v = 0; v < kern::kDwVariantCount; ++v)
        EXPECT_NE(names_line.find((v ? "| " : "[") + std::to_string(v) + " " + kern::dwconv3x3_variant_name(v)),
                  std::string::npos)
            << names_line;
    for (int v = 0; v < kern::kDwWgradVariantCount; ++v)
        EXPECT_NE(names_line.find(std::to_string(v) + " " + kern::dwconv3x3_wgrad_variant_name(v)), std::string::npos)
            << names_line;

    for (const model::ConvUse& u : uses) {
        const kern::ConvShape& s = u.shape;
        const std::string what = s.describe();
        // The shape's line, and its variants line when the custom kernels won.
        size_t k = 0;
        while (k < lines.size() && lines[k].rfind(s.describe() + ":", 0) != 0) ++k;
        ASSERT_LT(k, lines.size()) << what << ": not in describe()";
        // Autotuned: the variants line follows whichever implementation won.
        const bool custom = lines[k].find("custom-depthwise") != std::string::npos;
        ASSERT_LT(k + 1, lines.size()) << what;
        const std::string& vl = lines[k + 1];
        ASSERT_EQ(vl.find("  dwconv variants: fwd "), 0u) << vl;
        const std::vector<double> fwd = variant_times(vl, "fwd "), dgrad = variant_times(vl, "dgrad ");
        const std::vector<double> dgrad_ow = variant_times(vl, "dgrad overwrite ");
        const std::vector<double> wgrad = variant_times(vl, "wgrad ");
        ASSERT_EQ(static_cast<int>(fwd.size()), kern::kDwVariantCount) << vl;
        ASSERT_EQ(static_cast<int>(dgrad.size()), kern::kDwVariantCount) << vl;
        ASSERT_EQ(static_cast<int>(wgrad.size()), kern::kDwWgradVariantCount) << vl;
        // Each mode the step runs timed on its own (the overwrite one reads no dx): only those.
        ASSERT_EQ(static_cast<int>(dgrad_ow.size()), u.needs_overwrite() ? kern::kDwVariantCount : 0) << vl;
        for (int v = 0; v < kern::kDwVariantCount; ++v) {
            EXPECT_GE(fwd[v], 0) << vl << " forward variant " << v << " not timed";
            EXPECT_EQ(dgrad[v] >= 0, kern::dw_variant_valid(v, s.stride, true)) << vl << " dgrad variant " << v;
            if (!dgrad_ow.empty()) {
                EXPECT_EQ(dgrad_ow[v] >= 0, kern::dw_variant_valid(v, s.stride, true)) << vl << " overwrite " << v;
            }
        }
        // The chosen variants are the fastest timed (ties: the first).
        const int fv = std::atoi(vl.c_str() + vl.find("fwd ") + 4);
        const int dv = std::atoi(vl.c_str() + vl.find("dgrad ") + 6);
        if (!dgrad_ow.empty()) {
            const int ov = std::atoi(vl.c_str() + vl.find("dgrad overwrite ") + 16);
            for (int v = 0; v < kern::kDwVariantCount; ++v)
                if (dgrad_ow[v] >= 0) {
                    EXPECT_LE(dgrad_ow[ov], dgrad_ow[v]) << vl;
                }
            EXPECT_NE(vl.find("dgrad overwrite " + std::to_string(ov) + " (" + kern::dwconv3x3_variant_name(ov) + ")"),
                      std::string::npos)
                << vl;
        }
        const int wv = std::atoi(vl.c_str() + vl.find("wgrad ") + 6);
        for (int v = 0; v < kern::kDwWgradVariantCount; ++v) {
            EXPECT_GE(wgrad[v], 0) << vl << " wgrad variant " << v << " not timed";
            EXPECT_LE(wgrad[wv], wgrad[v]) << vl;
        }
        EXPECT_NE(vl.find("wgrad " + std::to_string(wv) + " (" + kern::dwconv3x3_wgrad_variant_name(wv) + ")"),
                  std::string::npos)
            << vl;
        for (int v = 0; v < kern::kDwVariantCount; ++v) {
            EXPECT_LE(fwd[fv], fwd[v]) << vl;
            if (dgrad[v] >= 0) {
                EXPECT_LE(dgrad[dv], dgrad[v]) << vl;
            }
        }
        EXPECT_NE(vl.find("fwd " + std::to_string(fv) + " (" + kern::dwconv3x3_variant_name(fv) + ")"),
                  std::string::npos)
            << vl;
        if (!custom) std::printf("  %s: cuDNN was faster here; outputs compared to rounding\n", what.c_str());

        // Outputs through GpuOps against the default variant called directly.
        const size_t xn = s.in().numel(), yn = s.out().numel(), wn = s.weight_numel();
        const std::vector<float> x = sftest::bf16_exact(sftest::random_uniform(xn, 11, -1, 1));
        const std::vector<float> w = sftest::bf16_exact(sftest::random_uniform(wn, 12, -0.5, 0.5));
        const std::vector<float> dy = sftest::bf16_exact(sftest::random_uniform(yn, 13, -1, 1));
        const std::vector<float> dx0 = sftest::bf16_exact(sftest::random_uniform(xn, 14, -0.5, 0.5));
        Dev dx_(xn * 2), dw_(wn * 2), ddy(yn * 2), y1(yn * 2), y2(yn * 2), dx1(xn * 2), dx2(xn * 2);
        Dev dxo1(xn * 2), dxo2(xn * 2);  // the overwrite mode's dx (filled with dx0: it must not be read)
        Dev dw1(wn * 4), dw2(wn * 4), dws(kern::dwconv3x3_workspace_floats(s) * 4);
        sftest::upload_bf16(dx_.h(), x);
        sftest::upload_bf16(dw_.h(), w);
        sftest::upload_bf16(ddy.h(), dy);
        sftest::upload_bf16(dx1.h(), dx0);
        sftest::upload_bf16(dx2.h(), dx0);
        sftest::upload_bf16(dxo1.h(), dx0);
        sftest::upload_bf16(dxo2.h(), dx0);
        sftest::upload(dw1.f(), std::vector<float>(wn, 0.25f));
        sftest::upload(dw2.f(), std::vector<float>(wn, 0.25f));
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        const rt::Exec& ex = ctx.exec();
        ops.conv_forward(ex, s, dx_.h(), dw_.h(), y1.h());
        ops.conv_backward_data(ex, s, ddy.h(), dw_.h(), dx1.h(), true);
        ops.conv_backward_filter(ex, s, dx_.h(), ddy.h(), dw1.f());
        kern::dwconv3x3_forward_cuda(ex, s, dx_.h(), dw_.h(), y2.h());
        kern::dwconv3x3_backward_data_cuda(ex, s, ddy.h(), dw_.h(), dx2.h(), true);
        kern::dwconv3x3_backward_filter_cuda(ex, s, dx_.h(), ddy.h(), dw2.f(), dws.f(),
                                             kern::dwconv3x3_workspace_floats(s));
        if (u.needs_overwrite()) {
            ops.conv_backward_data(ex, s, ddy.h(), dw_.h(), dxo1.h(), false);
            kern::dwconv3x3_backward_data_cuda(ex, s, ddy.h(), dw_.h(), dxo2.h(), false);
        }
        ctx.synchronize();
        const std::vector<float> a_y = sftest::download_bf16(y1.h(), yn), b_y = sftest::download_bf16(y2.h(), yn);
        const std::vector<float> a_dx = sftest::download_bf16(dx1.h(), xn), b_dx = sftest::download_bf16(dx2.h(), xn);
        const std::vector<float> a_dw = sftest::download(dw1.f(), wn), b_dw = sftest::download(dw2.f(), wn);
        const std::vector<float> a_dxo = sftest::download_bf16(dxo1.h(), xn);
        const std::vector<float> b_dxo = sftest::download_bf16(dxo2.h(), xn);
        if (custom) {
            EXPECT_TRUE(bitwise_equal(a_y, b_y)) << what << " y";
            EXPECT_TRUE(bitwise_equal(a_dx, b_dx)) << what << " dx";
            EXPECT_TRUE(bitwise_equal(a_dw, b_dw)) << what << " dw";
            EXPECT_TRUE(bitwise_equal(a_dxo, b_dxo)) << what << " dx (overwrite)";
        } else {
            using sftest::close_rel_l2, sftest::to_double;
            EXPECT_TRUE(close_rel_l2(to_double(a_y), to_double(b_y), 1e-2, what + " y"));
            EXPECT_TRUE(close_rel_l2(to_double(a_dx), to_double(b_dx), 1e-2, what + " dx"));
            EXPECT_TRUE(close_rel_l2(to_double(a_dw), to_double(b_dw), 1e-2, what + " dw"));
            EXPECT_TRUE(close_rel_l2(to_double(a_dxo), to_double(b_dxo), 1e-2, what + " dx (overwrite)"));
        }
    }
}

// ConvPolicy::dw_variants = false (`bench step --no-dw-variants`): only variant 0 of each pass is timed
// and run, with and without the BN prologue; cuDNN against the custom kernels is still decided.
TEST(ModelGpuOpsGpu, VariantsOffTimeAndRunVariantZeroOnly) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const bool prologue : {false, true}) {
        const std::vector<model::ConvUse> uses = dw_uses(prologue);
        Autotuned tuned(ctx, uses, false);
        for (const model::ConvUse& u : uses) {
            const std::string what = u.shape.describe() + (prologue ? " with prologue" : "");
            size_t k = 0;
            while (k < tuned.lines.size() && tuned.lines[k].rfind(u.shape.describe() + ":", 0) != 0) ++k;
            ASSERT_LT(k + 1, tuned.lines.size()) << what << ": not in describe()";
            const std::string& vl = tuned.lines[k + 1];
            ASSERT_EQ(vl.find("  dwconv variants: fwd 0 "), 0u) << vl;
            for (const char* pass : {"fwd ", "dgrad ", "wgrad "}) {
                const std::vector<double> ms = variant_times(vl, pass);
                ASSERT_FALSE(ms.empty()) << vl << " " << pass;
                EXPECT_GE(ms[0], 0) << vl << " " << pass << "variant 0 not timed";
                for (size_t v = 1; v < ms.size(); ++v) EXPECT_EQ(ms[v], -1.0) << vl << " " << pass << "variant " << v;
            }
            EXPECT_NE(vl.find("dgrad 0 ("), std::string::npos) << vl;
            EXPECT_NE(vl.find("wgrad 0 ("), std::string::npos) << vl;
            if (prologue) {
                const std::vector<double> pro = variant_times(vl, "fwd with BN prologue ");
                ASSERT_FALSE(pro.empty()) << vl;
                EXPECT_GE(pro[0], 0) << vl;
                for (size_t v = 1; v < pro.size(); ++v) EXPECT_EQ(pro[v], -1.0) << vl << " prologue variant " << v;
            }
        }
    }
}

TEST(ModelGpuOpsGpu, PrologueForwardVariantsAutotunedAndBitwiseEqual) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    std::vector<model::ConvUse> uses = dw_uses(true);
    model::ConvUse plain;  // planned without a prologue: asking for one is refused
    plain.shape = dw_shape(2, 8, 8, 16, 1);
    uses.push_back(plain);
    Autotuned tuned(ctx, uses);
    const model::GpuOps& ops = tuned.ops;
    const std::vector<std::string>& lines = tuned.lines;
    const rt::Exec& ex = ctx.exec();

    for (size_t i = 0; i < 2; ++i) {
        const kern::ConvShape& s = uses[i].shape;
        const std::string what = s.describe();
        size_t k = 0;
        while (k < lines.size() && lines[k].rfind(s.describe() + ":", 0) != 0) ++k;
        ASSERT_LT(k + 1, lines.size()) << what << ": not in describe()";
        const std::string& vl = lines[k + 1];
        const size_t at = vl.find("fwd with BN prologue ");
        ASSERT_NE(at, std::string::npos) << vl;
        const std::vector<double> pro_ms = variant_times(vl.substr(at), "prologue ");
        ASSERT_EQ(static_cast<int>(pro_ms.size()), kern::kDwVariantCount) << vl;
        const int pv = std::atoi(vl.c_str() + at + std::string("fwd with BN prologue ").size());
        ASSERT_TRUE(kern::dw_variant_prologue(pv)) << vl;
        for (int v = 0; v < kern::kDwVariantCount; ++v) {
            EXPECT_EQ(pro_ms[v] >= 0, kern::dw_variant_prologue(v)) << vl << " prologue variant " << v;
            if (pro_ms[v] >= 0) {
                EXPECT_LE(pro_ms[pv], pro_ms[v]) << vl;
            }
        }

        // Through GpuOps (the chosen variant) against variant 0 called directly: the same bits.
        const size_t xn = s.in().numel(), yn = s.out().numel(), wn = s.weight_numel(), c = s.cin;
        const std::vector<float> x = sftest::bf16_exact(sftest::random_uniform(xn, 21, -2, 3));
        const std::vector<float> w = sftest::bf16_exact(sftest::random_uniform(wn, 22, -0.5, 0.5));
        std::vector<float> vec;  // gamma, beta, mean, invstd
        for (const auto& r : {std::pair<double, double>{0.5, 1.5}, {-0.8, 0.8}, {-0.5, 0.5}, {0.5, 2.0}}) {
            const std::vector<double> v = sftest::random_uniform(c, 23 + vec.size(), r.first, r.second);
            vec.insert(vec.end(), v.begin(), v.end());
        }
        Dev dx(xn * 2), dw(wn * 2), y1(yn * 2), y2(yn * 2), dv(4 * c * 4);
        sftest::upload_bf16(dx.h(), x);
        sftest::upload_bf16(dw.h(), w);
        sftest::upload(dv.f(), vec);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        const kern::DwPrologue pro = sftest::dw_prologue(kern::Act::Silu, dv.f(), dv.f() + c, dv.f() + 2 * c, dv.f() + 3 * c);
        ops.conv_forward_prologue(ex, s, dx.h(), dw.h(), y1.h(), pro);
        kern::dwconv3x3_forward_cuda(ex, s, dx.h(), dw.h(), y2.h(), &pro, 0);
        ctx.synchronize();
        EXPECT_TRUE(bitwise_equal(sftest::download_bf16(y1.h(), yn), sftest::download_bf16(y2.h(), yn)))
            << what << " y with the prologue, variant " << pv << " against variant 0";
    }
    // The plain shape's line has no prologue entry, and its prologue forward is refused.
    for (size_t k = 0; k < lines.size(); ++k) {
        if (lines[k].rfind(plain.shape.describe() + ":", 0) != 0) continue;
        EXPECT_EQ(lines[k].find("prologue"), std::string::npos) << lines[k];
        if (k + 1 < lines.size() && lines[k + 1].rfind("  dwconv variants", 0) == 0) {
            EXPECT_EQ(lines[k + 1].find("prologue"), std::string::npos) << lines[k + 1];
        }
    }
    kern::DwPrologue pro;
    SF_EXPECT_ERROR(ops.conv_forward_prologue(ex, plain.shape, nullptr, nullptr, nullptr, pro),
                    "planned without a BN prologue");
}

// ConvPolicy::dw_fused_bwd with autotuning: the stride-1 shape (both dgrad modes) has the fused backward
// timed in each mode and, when the custom kernels run it, runs it (the variants line says so); its dx
// and dw through GpuOps are those of the fused kernel called directly; the stride-2 shape never fuses
// and conv_backward_fused refuses it; a mode the step does not run is refused.
TEST(ModelGpuOpsGpu, FusedBackwardTimedAndRun) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    std::vector<model::ConvUse> uses = dw_uses(false);
    uses[0].dgrad_overwrite = true;
    uses[1].dgrad_accumulate = false;  // the stride-2 shape overwrites only
    uses[1].dgrad_overwrite = true;
    Autotuned tuned(ctx, uses, true, true);
    const model::GpuOps& ops = tuned.ops;
    const rt::Exec& ex = ctx.exec();
    for (const model::ConvUse& u : uses) {
        const kern::ConvShape& s = u.shape;
        const std::string what = s.describe();
        size_t k = 0;
        while (k < tuned.lines.size() && tuned.lines[k].rfind(what + ":", 0) != 0) ++k;
        ASSERT_LT(k + 1, tuned.lines.size()) << what << ": not in describe()";
        const std::string& head = tuned.lines[k];
        const std::string& vl = tuned.lines[k + 1];
        const bool custom = head.find("custom-depthwise") != std::string::npos;
        const bool fused = s.stride == 1 && custom;
        EXPECT_EQ(ops.dw_fused_backward(s), fused) << head;
        EXPECT_EQ(vl.find(", fused backward ") != std::string::npos, s.stride == 1) << vl;
        EXPECT_EQ(vl.find("fused backward runs") != std::string::npos, fused) << vl;
        if (s.stride == 1) {  // timed in both modes whichever implementation won
            const size_t a = vl.find(", fused ", vl.find(", fused backward ") + 1), o = vl.find(", fused overwrite ");
            ASSERT_NE(a, std::string::npos) << vl;
            ASSERT_NE(o, std::string::npos) << vl;
            EXPECT_GT(std::atof(vl.c_str() + a + 8), 0) << vl;
            EXPECT_GT(std::atof(vl.c_str() + o + 18), 0) << vl;
        }
        // describe_fused(): exactly the fused shapes, with their variants line.
        bool listed = false;
        for (const std::string& l : ops.describe_fused()) listed = listed || l == what + ": " + vl.substr(2);
        EXPECT_EQ(listed, fused) << vl;
        const size_t xn = s.in().numel(), wn = s.weight_numel();
        Dev x(xn * 2), w(wn * 2), dy(xn * 2), dx1(xn * 2), dx2(xn * 2), dw1(wn * 4), dw2(wn * 4);
        if (!fused) {
            SF_EXPECT_ERROR(ops.conv_backward_fused(ex, s, x.h(), dy.h(), w.h(), dx1.h(), dw1.f(), false),
                            "does not run a fused backward");
            continue;
        }
        sftest::upload_bf16(x.h(), sftest::bf16_exact(sftest::random_uniform(xn, 31, -1, 1)));
        sftest::upload_bf16(w.h(), sftest::bf16_exact(sftest::random_uniform(wn, 32, -0.5, 0.5)));
        sftest::upload_bf16(dy.h(), sftest::bf16_exact(sftest::random_uniform(xn, 33, -1, 1)));
        const std::vector<float> dx0 = sftest::bf16_exact(sftest::random_uniform(xn, 34, -0.5, 0.5));
        sftest::upload_bf16(dx1.h(), dx0);
        sftest::upload_bf16(dx2.h(), dx0);
        sftest::upload(dw1.f(), std::vector<float>(wn, 0.25f));
        sftest::upload(dw2.f(), std::vector<float>(wn, 0.25f));
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        const size_t wsf = kern::dwconv3x3_fused_workspace_floats(s);
        Dev ws(wsf * 4);
        ops.conv_backward_fused(ex, s, x.h(), dy.h(), w.h(), dx1.h(), dw1.f(), true);
        kern::dwconv3x3_backward_fused_cuda(ex, s, x.h(), dy.h(), w.h(), dx2.h(), dw2.f(), ws.f(), wsf, true);
        ctx.synchronize();
        EXPECT_TRUE(bitwise_equal(sftest::download_bf16(dx1.h(), xn), sftest::download_bf16(dx2.h(), xn))) << what;
        EXPECT_TRUE(bitwise_equal(sftest::download(dw1.f(), wn), sftest::download(dw2.f(), wn))) << what;
    }
    // An overwrite-only stride-1 shape under the deterministic policy (the custom kernels, untimed): fused,
    // and its accumulate mode, never planned, is refused before anything runs.
    model::ConvUse only_ow = uses[0];
    only_ow.shape = dw_shape(2, 8, 8, 16, 1);
    only_ow.dgrad_accumulate = false;
    kern::ConvPolicy det = kern::run_conv_policy(true);
    det.dw_fused_bwd = true;
    model::GpuOps dops(ex, det);
    dops.prepare({only_ow});
    Dev dws(dops.workspace_bytes());
    dops.bind_workspace(dws.p, dops.workspace_bytes());
    ASSERT_TRUE(dops.dw_fused_backward(only_ow.shape));
    Dev x(2048 * 2), dy(2048 * 2), w(144 * 2), dx(2048 * 2), dw(144 * 4);
    SF_EXPECT_ERROR(dops.conv_backward_fused(ex, only_ow.shape, x.h(), dy.h(), w.h(), dx.h(), dw.f(), true),
                    "asked to accumulate");
    {  // a BN prologue where the shape was planned without one
        Dev pv(4 * 16 * 4);
        const kern::DwPrologue pro = sftest::dw_prologue(kern::Act::Silu, pv.f(), pv.f() + 16, pv.f() + 32, pv.f() + 48);
        SF_EXPECT_ERROR(
            dops.conv_backward_fused(ex, only_ow.shape, x.h(), dy.h(), w.h(), dx.h(), dw.f(), false, &pro),
            "planned without a BN prologue");
    }
    // The BN's dx inside the fused kernel: only under dw_fused_bn_bwd, and with the workspace it declares.
    Dev v(8 * 16 * 4), bws(model::GpuOps::dw_fused_bn_workspace_floats(only_ow.shape) * 4);
    const float* vf = v.f();
    EXPECT_FALSE(dops.dw_fused_bn());
    SF_EXPECT_ERROR(dops.bn_dw_backward_fused(ex, only_ow.shape, kern::Act::Silu, dx.h(), dy.h(), vf, vf, vf, vf, v.f(),
                                              v.f(), x.h(), w.h(), dx.h(), dw.f(), false, bws.f(), 1 << 20),
                    "does not run a fused backward with its BN's dx");
    det.dw_fused_bn_bwd = true;
    model::GpuOps bops(ex, det);
    bops.prepare({only_ow});
    Dev bw(bops.workspace_bytes());
    bops.bind_workspace(bw.p, bops.workspace_bytes());
    EXPECT_TRUE(bops.dw_fused_bn());
    const size_t need = model::GpuOps::dw_fused_bn_workspace_floats(only_ow.shape);
    EXPECT_EQ(need, kern::bn_act_workspace_floats(128, 16) + kern::dwconv3x3_fused_workspace_floats(only_ow.shape));
    SF_EXPECT_ERROR(bops.bn_dw_backward_fused(ex, only_ow.shape, kern::Act::Silu, x.h(), dy.h(), vf, vf, vf, vf, v.f(),
                                              v.f() + 16, x.h(), w.h(), dx.h(), dw.f(), false, bws.f(), need - 1),
                    "workspace of", "needed");
}

// The fused LiteBlock's shape (planned with the expand's BN prologue) under dw_fused_bwd: fused, its fused
// backward timed with the prologue, and conv_backward_fused with the prologue runs exactly the kernel's
// prologue form (dx and dw bitwise the launcher's).
TEST(ModelGpuOpsGpu, FusedBackwardWithTheBnPrologue) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const std::vector<model::ConvUse> uses = {dw_uses(true)[0]};  // stride 1, SiLU prologue
    Autotuned tuned(ctx, uses, true, true);
    const model::GpuOps& ops = tuned.ops;
    const kern::ConvShape& s = uses[0].shape;
    ASSERT_TRUE(ops.dw_fused_backward(s));
    bool timed = false;
    for (const std::string& l : ops.describe_fused()) {
        const size_t r = l.find(", fused backward runs");
        const size_t a = r == std::string::npos ? r : l.find(", fused ", r + 1);
        timed = timed || (a != std::string::npos && std::atof(l.c_str() + a + 8) > 0);
    }
    EXPECT_TRUE(timed) << "the prologue shape's fused backward has no time";
    const rt::Exec& ex = ctx.exec();
    const size_t xn = s.in().numel(), wn = s.weight_numel(), c = static_cast<size_t>(s.cin);
    Dev x(xn * 2), w(wn * 2), dy(xn * 2), dx1(xn * 2), dx2(xn * 2), dw1(wn * 4), dw2(wn * 4), v(4 * c * 4);
    sftest::upload_bf16(x.h(), sftest::bf16_exact(sftest::random_uniform(xn, 41, -1, 1)));
    sftest::upload_bf16(w.h(), sftest::bf16_exact(sftest::random_uniform(wn, 42, -0.5, 0.5)));
    sftest::upload_bf16(dy.h(), sftest::bf16_exact(sftest::random_uniform(xn, 43, -1, 1)));
    std::vector<float> vec;
    for (int k = 0; k < 4; ++k) {
        const std::vector<double> r = sftest::random_uniform(c, 44 + k, k == 1 ? -0.5 : 0.5, k == 1 ? 0.5 : 1.5);
        vec.insert(vec.end(), r.begin(), r.end());
    }
    sftest::upload(v.f(), vec);
    const std::vector<float> dx0 = sftest::bf16_exact(sftest::random_uniform(xn, 48, -0.5, 0.5));
    sftest::upload_bf16(dx1.h(), dx0);
    sftest::upload_bf16(dx2.h(), dx0);
    sftest::upload(dw1.f(), std::vector<float>(wn, 0.25f));
    sftest::upload(dw2.f(), std::vector<float>(wn, 0.25f));
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const kern::DwPrologue pro = sftest::dw_prologue(kern::Act::Silu, v.f(), v.f() + c, v.f() + 2 * c, v.f() + 3 * c);
    const size_t wsf = kern::dwconv3x3_fused_workspace_floats(s);
    Dev ws(wsf * 4);
    ops.conv_backward_fused(ex, s, x.h(), dy.h(), w.h(), dx1.h(), dw1.f(), true, &pro);
    kern::dwconv3x3_backward_fused_cuda(ex, s, x.h(), dy.h(), w.h(), dx2.h(), dw2.f(), ws.f(), wsf, true, nullptr,
                                        kern::kDwFusedMaxBlocks, &pro);
    ctx.synchronize();
    EXPECT_TRUE(bitwise_equal(sftest::download_bf16(dx1.h(), xn), sftest::download_bf16(dx2.h(), xn)));
    EXPECT_TRUE(bitwise_equal(sftest::download(dw1.f(), wn), sftest::download(dw2.f(), wn)));
    // Not the plain fused kernel: the prologue changed the filter gradient.
    Dev dw3(wn * 4);
    sftest::upload(dw3.f(), std::vector<float>(wn, 0.25f));
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    ops.conv_backward_fused(ex, s, x.h(), dy.h(), w.h(), dx2.h(), dw3.f(), true);
    ctx.synchronize();
    EXPECT_FALSE(bitwise_equal(sftest::download(dw1.f(), wn), sftest::download(dw3.f(), wn)));
}

}  // namespace
