// `slidefuse check` through the whole network on the CPU (64x128, batch 2): the layer list the
// captures use is the planner's (every conv layer, execution order), a step captures every
// layer's output and gradient once, the reference against itself passes, and a planted change of
// one layer's weights is named first (that layer's forward output, every earlier output exactly
// equal); then the command itself: exit 3 naming the layer (and its JSON), 0 unperturbed, 1 on
// bad input, 2 without a GPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/check.h"
#include "tools/layer_check.h"

namespace {

namespace fs = std::filesystem;

tools::CheckOptions small_options() {
    tools::CheckOptions o = tools::parse_check_args(
        {"--reference-only", "--batch", "2", "--height", "64", "--width", "128", "--seed", "5"});
    EXPECT_EQ(o.tol.rel_l2, tools::kReferenceOnlyRelL2);
    EXPECT_EQ(o.tol.cosine, tools::kReferenceOnlyCosine);
    return o;
}

TEST(CheckNet, LayerOutputsAreThePlannersLayersInOrder) {
    const model::SiderNet net({2, 2, 64, 128}, rt::MemKind::Host);
    const std::vector<model::LayerOutput<float>> outs = net.layer_outputs();
    const std::vector<model::LayerUse>& uses = net.plan().layers();
    ASSERT_EQ(outs.size(), uses.size());
    for (size_t i = 0; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i].name, uses[i].name) << i;
        EXPECT_EQ(outs[i].out != nullptr, uses[i].batchnorm) << outs[i].name;
        EXPECT_EQ(outs[i].logits != nullptr, !uses[i].batchnorm) << outs[i].name;
        const kern::Shape4 s = outs[i].out ? outs[i].out->shape : outs[i].logits->shape;
        EXPECT_EQ(s.numel(), uses[i].shape.out().numel()) << outs[i].name;
    }
}

class CheckNetStep : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        opts_ = new tools::CheckOptions(small_options());
        setup_ = new tools::CheckSetup(tools::make_setup(*opts_));
        net_ = new model::SiderNet(setup_->shape, rt::MemKind::Host);
        init_ = new tools::NetState(tools::init_state(net_->table(), setup_->seed));
        tools::load_state(*net_, *init_);
        ref_ = new tools::StepCapture(tools::reference_step(*setup_, *net_));
    }
    static void TearDownTestSuite() {
        delete ref_;
        delete init_;
        delete net_;
        delete setup_;
        delete opts_;
    }
    // The same step with `layer`'s weights changed (none when empty), compared with the reference.
    static tools::CheckReport perturbed(const std::string& layer) {
        tools::load_state(*net_, *init_);
        if (!layer.empty()) tools::perturb_layer(*net_, layer, 1e-2, setup_->seed);
        const tools::StepCapture got = tools::reference_step(*setup_, *net_);
        return tools::build_report(*ref_, got, net_->table(), opts_->tol);
    }
    static tools::CheckOptions* opts_;
    static tools::CheckSetup* setup_;
    static model::SiderNet* net_;
    static tools::NetState* init_;
    static tools::StepCapture* ref_;
};
tools::CheckOptions* CheckNetStep::opts_ = nullptr;
tools::CheckSetup* CheckNetStep::setup_ = nullptr;
model::SiderNet* CheckNetStep::net_ = nullptr;
tools::NetState* CheckNetStep::init_ = nullptr;
tools::StepCapture* CheckNetStep::ref_ = nullptr;

TEST_F(CheckNetStep, EveryLayerCapturedOnce) {
    const size_t n = net_->plan().layers().size();
    ASSERT_EQ(ref_->layers.size(), n);
    EXPECT_EQ(ref_->forward_order.size(), n);
    EXPECT_EQ(ref_->backward_order.size(), n);
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(ref_->forward_order[i], i);  // forward runs in network order
        const tools::LayerCapture& l = ref_->layers[i];
        EXPECT_FALSE(l.out.empty()) << l.name;
        EXPECT_EQ(l.out.size(), l.grad_out.size()) << l.name;
        double g = 0;
        for (float v : l.grad_out) g += static_cast<double>(v) * v;
        // The angle head has no gradient without a rotated sample (its loss term is then 0).
        if (l.name.rfind("dual_head.angle.", 0) == 0 && !ref_->loss.angle_used) continue;
        EXPECT_GT(g, 0) << l.name << ": its gradient is all zero when its backward begins";
    }
    EXPECT_EQ(ref_->backward_order.front(), n - 1);  // the last head's logits first
    EXPECT_EQ(ref_->backward_order.back(), 0u);      // the stem's first conv last
    EXPECT_TRUE(std::isfinite(ref_->loss.total));
    EXPECT_GT(ref_->loss.total, 0);
}

TEST_F(CheckNetStep, ReferenceAgainstItselfPasses) {
    const tools::CheckReport r = perturbed("");
    EXPECT_TRUE(r.passed()) << tools::verdict(r);
    for (const tools::CheckEntry& e : r.entries) {
        if (e.rule.empty()) {
            EXPECT_EQ(e.m.rel_l2, 0) << e.layer << " " << e.tensor;  // bitwise repeatable
        }
    }
}

TEST_F(CheckNetStep, PlantedPerturbationNamesItsLayer) {
    for (const std::string layer :
         {"stem.conv1", "stage3.fusion.up_1_16_to_1_8.1", "lite_fpn.fuse_1_8.smooth", "dual_head.offset.conv2"}) {
        const tools::CheckReport r = perturbed(layer);
        ASSERT_FALSE(r.passed()) << layer;
        const tools::CheckEntry& f = r.entries[static_cast<size_t>(r.first_failure)];
        EXPECT_EQ(f.layer, layer) << tools::verdict(r);
        EXPECT_EQ(f.tensor, "out") << tools::verdict(r);
        EXPECT_EQ(f.phase, tools::Phase::Forward);
        EXPECT_GT(f.m.rel_l2, 1e-3) << layer;  // a 1e-2 weight change shows at its own output
        // Every forward output before it is exactly the reference's.
        for (size_t i : r.eval_order) {
            if (static_cast<long>(i) == r.first_failure) break;
            EXPECT_EQ(r.entries[i].m.rel_l2, 0) << r.entries[i].layer;
        }
    }
}

// Isolated comparison: the reference computes each layer from the checked step's values, so a
// planted change shows at its own layer only; every other forward output is bitwise equal.
TEST_F(CheckNetStep, IsolatedComparisonConfinesAChangeToItsLayer) {
    const std::string layer = "stage3.fusion.up_1_16_to_1_8.1";
    model::SiderNet other(setup_->shape, rt::MemKind::Host);
    tools::load_state(other, *init_);
    tools::perturb_layer(other, layer, 1e-2, setup_->seed);
    const tools::StepCapture got = tools::reference_step(*setup_, other);
    tools::load_state(*net_, *init_);
    const tools::StepCapture want = tools::reference_step(*setup_, *net_, &got);
    const tools::CheckReport r = tools::build_report(want, got, net_->table(), opts_->tol);
    ASSERT_FALSE(r.passed());
    const tools::CheckEntry& f = r.entries[static_cast<size_t>(r.first_failure)];
    EXPECT_EQ(f.layer, layer) << tools::verdict(r);
    EXPECT_EQ(f.tensor, "out");
    for (const tools::CheckEntry& e : r.entries) {
        if (e.phase == tools::Phase::Forward && e.layer != layer) {
            EXPECT_EQ(e.m.rel_l2, 0) << e.layer;
        }
    }
    // Loss terms see the same logits on both sides.
    for (const tools::CheckEntry& e : r.entries) {
        if (e.phase == tools::Phase::Loss) {
            EXPECT_EQ(e.m.rel_l2, 0) << e.tensor;
        }
    }
    // Beyond tolerance: the layer's output, its parameter gradients and the gradient it passes back.
    EXPECT_LE(r.failures(), 8u) << tools::verdict(r);
}

// The reason for the isolated default (docs/CHECK.md): rounding the conv weights to bf16, as the
// CUDA step does, and nothing else, moves an end-to-end comparison at initialisation far past the
// cosine 0.999 of DESIGN §2 (differences grow with depth), while each layer on its own stays at
// the size of one rounding.
TEST_F(CheckNetStep, Bf16WeightsAloneExceedEndToEndToleranceButNotIsolated) {
    model::SiderNet other(setup_->shape, rt::MemKind::Host);
    tools::load_state(other, *init_);
    EXPECT_GT(tools::round_conv_weights_bf16(other), 3000000u);
    const tools::StepCapture got = tools::reference_step(*setup_, other);
    tools::CheckTolerance tol;  // the CUDA defaults: rel L2 5e-2, cosine 0.999
    tools::load_state(*net_, *init_);
    const tools::CheckReport e2e = tools::build_report(*ref_, got, net_->table(), tol);
    const tools::CheckReport iso =
        tools::build_report(tools::reference_step(*setup_, *net_, &got), got, net_->table(), tol);
    double e2e_fwd = 0, iso_fwd = 0;
    for (const tools::CheckEntry& e : e2e.entries)
        if (e.phase == tools::Phase::Forward) e2e_fwd = std::max(e2e_fwd, e.m.rel_l2);
    for (const tools::CheckEntry& e : iso.entries)
        if (e.phase == tools::Phase::Forward) iso_fwd = std::max(iso_fwd, e.m.rel_l2);
    EXPECT_FALSE(e2e.passed());
    EXPECT_GT(e2e.failures(), 100u) << tools::verdict(e2e);
    EXPECT_GT(e2e_fwd, 2e-2);
    EXPECT_LT(iso_fwd, 5e-3);  // one bf16 rounding of the weights: ~2e-3
    // Measured at this shape and seed: 581 of 729 beyond end to end (forward up to 7.4e-2),
    // none isolated (forward up to 1.9e-3).
    EXPECT_EQ(iso.failures(), 0u) << tools::verdict(iso);
}

TEST_F(CheckNetStep, UnknownPerturbedLayerIsAnError) {
    model::SiderNet other(setup_->shape, rt::MemKind::Host);
    SF_EXPECT_ERROR(tools::perturb_layer(other, "stage2.nothing", 1e-2, 1), "no layer 'stage2.nothing'");
    // A parameter that is not a conv layer's.
    SF_EXPECT_ERROR(tools::perturb_layer(other, "lite_fpn.fuse_1_8", 1e-2, 1), "no layer 'lite_fpn.fuse_1_8'");
}

// ---- the command ----

std::string slidefuse_exe() {
#ifdef SF_SLIDEFUSE_EXE
    if (::access(SF_SLIDEFUSE_EXE, X_OK) == 0) return SF_SLIDEFUSE_EXE;
#endif
    const char* e = std::getenv("SF_SLIDEFUSE");
    return e ? e : "";
}

struct CliResult {
    int code = -1;
    std::string output;
};

CliResult run_check(const std::string& args, const fs::path& dir) {
    const std::string exe = slidefuse_exe();
    EXPECT_FALSE(exe.empty()) << "the slidefuse executable was not found";
    const fs::path log = dir / "out.txt";
    const int rc = std::system((exe + " check " + args + " > " + log.string() + " 2>&1").c_str());
    CliResult r;
    r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    r.output = ss.str();
    return r;
}

class CheckCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("sf_check_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

constexpr const char* kSmall = "--batch 2 --height 64 --width 128";

TEST_F(CheckCli, NoGpuExitsTwoAtOnce) {
    std::string why;
    if (sftest::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU exit cannot be observed";
    const CliResult r = run_check(kSmall, dir_);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("no usable GPU"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("CPU reference step"), std::string::npos) << "it should stop before any work";
}

TEST_F(CheckCli, PerturbedReferenceExitsThreeNamingTheLayer) {
    const fs::path json = dir_ / "check.json";
    const CliResult r = run_check(
        std::string("--reference-only --perturb stage2.fusion.smooth_1_4 ") + kSmall + " --json " + json.string(),
        dir_);
    EXPECT_EQ(r.code, 3) << r.output;
    EXPECT_NE(r.output.find("first beyond tolerance: stage2.fusion.smooth_1_4 [out] (forward"), std::string::npos)
        << r.output;
    std::ifstream f(json);
    ASSERT_TRUE(f.good()) << json;
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j["schema"], "slidefuse.check/1");
    EXPECT_EQ(j["mode"], "reference");
    EXPECT_EQ(j["perturb"]["layer"], "stage2.fusion.smooth_1_4");
    EXPECT_EQ(j["config"]["height"], 64);
    EXPECT_FALSE(j["passed"].get<bool>());
    EXPECT_EQ(j["first_failure"]["layer"], "stage2.fusion.smooth_1_4");
    EXPECT_EQ(j["first_failure"]["tensor"], "out");
    EXPECT_EQ(j["logits"].size(), 4u);
}

TEST_F(CheckCli, UnperturbedReferenceExitsZero) {
    const CliResult r = run_check(std::string("--reference-only ") + kSmall, dir_);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("tensors within tolerance"), std::string::npos) << r.output;
}

TEST_F(CheckCli, BadInputExitsOne) {
    for (const std::string args : {"--perturb stem.conv1", "--bf16-weights", "--batch 0", "--tol-cos 2", "--bogus",
                                   "--reference-only --perturb no.such.layer --batch 2 --height 64 --width 128",
                                   "--reference-only --height 48 --width 128"}) {
        const CliResult r = run_check(args, dir_);
        EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
        EXPECT_NE(r.output.find("error"), std::string::npos) << args << "\n" << r.output;
    }
    const CliResult h = run_check("--help", dir_);
    EXPECT_EQ(h.code, 0);
    EXPECT_NE(h.output.find("--tol-rel-l2"), std::string::npos) << h.output;
}

}  // namespace
