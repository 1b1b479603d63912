// tools/config: the to_yaml round trip field by field, the atomic writer and the config hash.
#include "tests/tools_config_test_util.h"
#include "tools/train.h"

namespace {

using namespace config_test;

// ---- round trip, writer, hash ----

// One change per field of TrainConfig (all valid), so equality, to_yaml and parsing are each checked
// to cover every field.
std::vector<std::pair<std::string, std::function<void(TrainConfig&)>>> field_changes() {
    using tools::AmpMode, tools::Backend, tools::DataSource, tools::GuardMode, tools::SchedType;
    return {
        {"model.input_channels", [](TrainConfig& c) { c.model.input_channels = 4; }},
        {"model.input_height", [](TrainConfig& c) { c.model.input_height = 64; }},
        {"model.input_width", [](TrainConfig& c) { c.model.input_width = 128; }},
        {"model.fusion_up_order", [](TrainConfig& c) { c.model.fusion_up_order = tools::UpOrderSetting::ConvFirst; }},
        {"model.fuse_expand_dw", [](TrainConfig& c) { c.model.fuse_expand_dw = true; }},
        {"model.fuse_dw_pw", [](TrainConfig& c) { c.model.fuse_dw_pw = true; }},
        {"model.merge_heads", [](TrainConfig& c) { c.model.merge_heads = true; }},
        {"model.fuse_head_bn", [](TrainConfig& c) { c.model.fuse_head_bn = true; }},
        {"model.fuse_up_bn", [](TrainConfig& c) { c.model.fuse_up_bn = true; }},
        {"cuda.pdl", [](TrainConfig& c) { c.cuda.pdl = true; }},
        {"cuda.dw_variants", [](TrainConfig& c) { c.cuda.dw_variants = false; }},
        {"cuda.bn_row_batch", [](TrainConfig& c) { c.cuda.bn_row_batch = 4; }},
        {"cuda.bn_min_blocks", [](TrainConfig& c) { c.cuda.bn_min_blocks = 3; }},
        {"cuda.upsample_row_loads", [](TrainConfig& c) { c.cuda.upsample_row_loads = true; }},
        {"cuda.dw_fused_bwd", [](TrainConfig& c) { c.cuda.dw_fused_bwd = true; }},
        {"cuda.dw_fused_bn_bwd", [](TrainConfig& c) { c.cuda.dw_fused_bwd = c.cuda.dw_fused_bn_bwd = true; }},
        {"cuda.dw_fused_bn_grad",
         [](TrainConfig& c) { c.cuda.dw_fused_bwd = c.model.fuse_expand_dw = c.cuda.dw_fused_bn_grad = true; }},
        {"cuda.pw_custom", [](TrainConfig& c) { c.cuda.pw_custom = true; }},
        {"cuda.pw_stats", [](TrainConfig& c) { c.cuda.pw_custom = c.cuda.pw_stats = true; }},
        {"cuda.pw_bn_grad", [](TrainConfig& c) { c.cuda.pw_custom = c.cuda.pw_bn_grad = true; }},
        {"cuda.pw_bn_bwd", [](TrainConfig& c) { c.cuda.pw_custom = c.cuda.pw_bn_bwd = true; }},
        {"cuda.pw_fused_bwd", [](TrainConfig& c) { c.cuda.pw_custom = c.cuda.pw_fused_bwd = true; }},
        {"cuda.dw_stats", [](TrainConfig& c) { c.cuda.dw_stats = true; }},
        {"cuda.head_bn_grad", [](TrainConfig& c) { c.model.fuse_head_bn = c.cuda.head_bn_grad = true; }},
        {"cuda.head_bn_dx",
         [](TrainConfig& c) { c.model.fuse_head_bn = c.cuda.head_bn_grad = c.cuda.head_bn_dx = true; }},
        {"cuda.branch_lanes", [](TrainConfig& c) { c.cuda.branch_lanes = true; }},
        {"optimizer.lr", [](TrainConfig& c) { c.optimizer.lr = 0.1 + 0.2; }},  // 0.30000000000000004
        {"optimizer.betas[0]", [](TrainConfig& c) { c.optimizer.betas[0] = 0.8; }},
        {"optimizer.betas[1]", [](TrainConfig& c) { c.optimizer.betas[1] = 0.95; }},
        {"optimizer.eps", [](TrainConfig& c) { c.optimizer.eps = 1e-6; }},
        {"optimizer.weight_decay", [](TrainConfig& c) { c.optimizer.weight_decay = 0.0; }},
        {"optimizer.clip_grad_norm", [](TrainConfig& c) { c.optimizer.clip_grad_norm = 0.0; }},
        {"sched.type", [](TrainConfig& c) { c.sched.type = SchedType::WarmupCosine; }},
        {"sched.epochs", [](TrainConfig& c) { c.sched.epochs = 64; }},
        {"sched.warmup_epochs", [](TrainConfig& c) { c.sched.warmup_epochs = 3; }},
        {"sched.t_mult", [](TrainConfig& c) { c.sched.t_mult = 1; }},
        {"sched.cosine_min_lr", [](TrainConfig& c) { c.sched.cosine_min_lr = 1.0 / 3.0 * 1e-5; }},
        {"sched.warmup_steps", [](TrainConfig& c) { c.sched.warmup_steps = 5000000000LL; }},
        {"train.amp", [](TrainConfig& c) { c.train.amp = AmpMode::Fp32; }},
        {"train.batch_size", [](TrainConfig& c) { c.train.batch_size = 7; }},
        {"train.gradient_accumulation_steps", [](TrainConfig& c) { c.train.gradient_accumulation_steps = 2; }},
        {"train.seed", [](TrainConfig& c) { c.train.seed = 1234567890123ull; }},
        {"train.backend", [](TrainConfig& c) { c.train.backend = Backend::Cpu; }},
        {"train.deterministic", [](TrainConfig& c) { c.train.deterministic = true; }},
        {"train.num_workers", [](TrainConfig& c) { c.train.num_workers = 0; }},
        {"train.prefetch_factor", [](TrainConfig& c) { c.train.prefetch_factor = 2; }},
        {"train.max_steps", [](TrainConfig& c) { c.train.max_steps = 20; }},
        {"loss.variant", [](TrainConfig& c) { c.loss.variant = model::LossVariant::Corrected; }},
        {"loss.weights.heatmap", [](TrainConfig& c) { c.loss.weights.heatmap = 2.0; }},
        {"loss.weights.offset", [](TrainConfig& c) { c.loss.weights.offset = 0.0; }},
        {"loss.weights.hard_negative", [](TrainConfig& c) { c.loss.weights.hard_negative = 0.5; }},
        {"loss.weights.angle", [](TrainConfig& c) { c.loss.weights.angle = 0.25; }},
        {"loss.weights.padding_bce", [](TrainConfig& c) { c.loss.weights.padding_bce = 0.5; }},
        {"loss.weights.y_axis", [](TrainConfig& c) { c.loss.weights.y_axis = 1e-3; }},
        {"data.source", [](TrainConfig& c) { c.data.source = DataSource::Shards; }},
        {"data.processed_dir", [](TrainConfig& c) { c.data.processed_dir = "D:\\data dir\\#1 \"q\": x\ty"; }},
        {"data.num_samples", [](TrainConfig& c) { c.data.num_samples = 4; }},
        {"eval.eval_interval", [](TrainConfig& c) { c.eval.eval_interval = 2; }},
        {"eval.select_by", [](TrainConfig& c) { c.eval.select_by = "mae_px"; }},
        {"eval.metrics",
         [](TrainConfig& c) {
             c.eval.metrics = {"hit_le_5px", "mae_px"};
         }},
        {"eval.early_stopping.enabled", [](TrainConfig& c) { c.eval.early_stopping.enabled = false; }},
        {"eval.early_stopping.min_epochs", [](TrainConfig& c) { c.eval.early_stopping.min_epochs = 0; }},
        {"eval.early_stopping.min_improvement", [](TrainConfig& c) { c.eval.early_stopping.min_improvement = 0.1; }},
        {"eval.early_stopping.patience", [](TrainConfig& c) { c.eval.early_stopping.patience = 16; }},
        {"eval.early_stopping.second_guard.metric",
         [](TrainConfig& c) { c.eval.early_stopping.second_guard.metric = "rmse_px"; }},
        {"eval.early_stopping.second_guard.min_delta",
         [](TrainConfig& c) { c.eval.early_stopping.second_guard.min_delta = 0.25; }},
        {"eval.early_stopping.second_guard.mode",
         [](TrainConfig& c) { c.eval.early_stopping.second_guard.mode = GuardMode::Max; }},
        {"logging.log_interval", [](TrainConfig& c) { c.logging.log_interval = 1; }},
        {"logging.log_dir", [](TrainConfig& c) { c.logging.log_dir = "runs/x"; }},
        {"checkpoints.save_dir", [](TrainConfig& c) { c.checkpoints.save_dir = "ckpt"; }},
        {"checkpoints.save_interval", [](TrainConfig& c) { c.checkpoints.save_interval = 5; }},
        {"checkpoints.save_best", [](TrainConfig& c) { c.checkpoints.save_best = false; }},
        {"checkpoints.keep_last", [](TrainConfig& c) { c.checkpoints.keep_last = 1; }},
    };
}

TEST(ToolsConfig, EveryFieldRoundTripsAndCountsForEqualityAndHash) {
    const TrainConfig base;
    const std::string base_yaml = tools::to_yaml(base);
    const std::string base_hash = tools::config_hash(base);
    EXPECT_TRUE(parse(base_yaml) == base);
    for (const auto& [name, change] : field_changes()) {
        SCOPED_TRACE(name);
        TrainConfig c;
        change(c);
        EXPECT_FALSE(c == base) << "operator== misses the field";
        const std::string yaml = tools::to_yaml(c);
        EXPECT_NE(yaml, base_yaml) << "to_yaml misses the field";
        EXPECT_NE(tools::config_hash(c), base_hash);
        TrainConfig back;
        try {
            back = parse(yaml);
        } catch (const rt::Error& e) {
            ADD_FAILURE() << e.what() << "\n" << yaml;
            continue;
        }
        EXPECT_TRUE(back == c) << "round trip differs:\n" << yaml << "\nread back as\n" << tools::to_yaml(back);
        EXPECT_EQ(tools::to_yaml(back), yaml);
    }
}

TEST(ToolsConfig, ShippedConfigsRoundTrip) {
    for (const char* name : {"/configs/default.yaml", "/configs/cpu_smoke.yaml", "/configs/quickstart.yaml"}) {
        const TrainConfig c = tools::load_config(std::string(SF_SOURCE_DIR) + name, {});
        EXPECT_TRUE(parse(tools::to_yaml(c)) == c) << name;
    }
    const TrainConfig o = parse(kOriginal111);
    EXPECT_TRUE(parse(tools::to_yaml(o)) == o);
}

TEST(ToolsConfig, ToYamlWritesAmpAsAName) {
    TrainConfig c;
    EXPECT_TRUE(contains(tools::to_yaml(c), "  amp: bf16\n"));
    c.train.amp = tools::AmpMode::Fp32;
    EXPECT_TRUE(contains(tools::to_yaml(c), "  amp: fp32\n"));
}

TEST(ToolsConfig, WriteResolvedConfigWritesAFileThatLoadsBack) {
    const std::string dir = make_temp_dir();
    const std::string path = dir + "/resolved.yaml";
    TrainConfig c = parse("", {"optimizer.lr=0.001", "train.backend=cpu", "logging.log_dir=D:\\logs\\x"});
    tools::write_resolved_config(c, path);
    EXPECT_TRUE(tools::load_config(path, {}) == c);
    c.train.batch_size = 3;  // overwrite an existing file
    tools::write_resolved_config(c, path);
    EXPECT_EQ(tools::load_config(path, {}).train.batch_size, 3);
    EXPECT_EQ(list_dir(dir), std::vector<std::string>{"resolved.yaml"}) << "no temp file left behind";
    EXPECT_THROW(tools::write_resolved_config(c, dir + "/no/such/dir/x.yaml"), rt::Error);
}

TEST(ToolsConfig, ConfigHashIsStableHexAndChangesWithValues) {
    const TrainConfig a, b;
    const std::string h = tools::config_hash(a);
    EXPECT_EQ(h.size(), 16u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
    EXPECT_EQ(h, tools::config_hash(b));
    EXPECT_EQ(h, tools::config_hash(tools::load_config(SF_SOURCE_DIR "/configs/default.yaml", {})));
    TrainConfig c;
    c.optimizer.lr = 1e-4;
    EXPECT_NE(tools::config_hash(c), h);
}

// The resume check's text and hash (tools/train.h): the config without the cuda section (kernel choices may
// change between save and resume) nor its output locations, the text of the format before the cuda
// section existed (so a checkpoint written then still resumes).
TEST(ToolsConfig, ResumeHashIgnoresTheKernelsAndOutputsButNotTheRun) {
    const TrainConfig base;
    const std::string yaml = tools::resume_config_yaml(base);
    EXPECT_FALSE(contains(yaml, "cuda:"));
    std::string full = tools::to_yaml(tools::resume_config(base));
    const size_t a = full.find("cuda:\n"), e = full.find("optimizer:\n");
    ASSERT_TRUE(a != std::string::npos && e != std::string::npos && a < e);
    EXPECT_EQ(full.erase(a, e - a), yaml) << "the resume text is the full text without the cuda section";
    EXPECT_EQ(tools::resume_config_hash(base), tools::text_hash(yaml));
    const std::string h = tools::resume_config_hash(base);
    for (const auto& [name, change] : field_changes()) {
        TrainConfig c;
        change(c);
        const bool ignored = name.rfind("cuda.", 0) == 0 || name == "logging.log_dir" || name == "checkpoints.save_dir";
        // The cuda switches whose setters turn a model fusion on as well (what they build on).
        const bool with_model =
            name == "cuda.dw_fused_bn_grad" || name == "cuda.head_bn_grad" || name == "cuda.head_bn_dx";
        EXPECT_EQ(tools::resume_config_hash(c) == h, ignored && !with_model) << name;
    }
}

TEST(ToolsConfig, LossConfigTakesVariantAndWeights) {
    const TrainConfig c = parse("loss:\n  variant: corrected\n  weights:\n    hard_negative: 0.5\n    y_axis: 0.0\n");
    const model::LossConfig l = tools::loss_config(c);
    const model::LossConfig d;
    EXPECT_EQ(l.variant, model::LossVariant::Corrected);
    EXPECT_EQ(l.w_heatmap, 1.0);
    EXPECT_EQ(l.w_offset, 1.0);
    EXPECT_EQ(l.w_hard_negative, 0.5);
    EXPECT_EQ(l.w_angle, 0.5);
    EXPECT_EQ(l.w_padding_bce, 0.3);
    EXPECT_EQ(l.w_y_axis, 0.0);
    EXPECT_EQ(l.focal_alpha, d.focal_alpha);
    EXPECT_EQ(l.sigma, d.sigma);
    // the config defaults are LossConfig's defaults
    const model::LossConfig ld = tools::loss_config(TrainConfig{});
    EXPECT_EQ(ld.variant, d.variant);
    EXPECT_EQ(ld.w_heatmap, d.w_heatmap);
    EXPECT_EQ(ld.w_offset, d.w_offset);
    EXPECT_EQ(ld.w_hard_negative, d.w_hard_negative);
    EXPECT_EQ(ld.w_angle, d.w_angle);
    EXPECT_EQ(ld.w_padding_bce, d.w_padding_bce);
    EXPECT_EQ(ld.w_y_axis, d.w_y_axis);
}

}  // namespace

// scripts/run.sh's GPU preset is the 1.1.1 recipe, shortened: everything but the length, the
// data location and the output folders equals configs/default.yaml.
TEST(ToolsConfig, QuickstartIsTheRecipeShortened) {
    const TrainConfig q = tools::load_config(std::string(SF_SOURCE_DIR) + "/configs/quickstart.yaml", {});
    TrainConfig d = tools::load_config(std::string(SF_SOURCE_DIR) + "/configs/default.yaml", {});
    EXPECT_EQ(q.train.backend, tools::Backend::Cuda);
    EXPECT_EQ(q.model.input_height, 256);
    EXPECT_EQ(q.model.input_width, 512);
    EXPECT_EQ(q.data.source, tools::DataSource::Synthetic);
    EXPECT_LT(q.sched.epochs * q.data.num_samples, d.sched.epochs * d.data.num_samples / 10);
    d.sched.epochs = q.sched.epochs;
    d.data = q.data;
    d.eval.early_stopping.enabled = q.eval.early_stopping.enabled;
    d.logging = q.logging;
    d.checkpoints = q.checkpoints;
    EXPECT_TRUE(d == q) << tools::to_yaml(q);
}
