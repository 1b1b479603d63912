// The CUDA inference path of `slidefuse eval` / `predict` (tools/eval_model.h, CudaInference)
// against the CPU reference inference on the same checkpoint and input: every sample's peak
// heatmap scores within 2e-2 relative (bf16 activations). Positions are printed, not compared:
// with untrained weights the heatmaps are nearly flat and the argmax may move under bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "data/generator.h"
#include "kernels/preprocess.h"
#include "model/checkpoint.h"
#include "model/init.h"
#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/config.h"
#include "tools/eval_model.h"

namespace {

constexpr int kBatch = 4, kH = 128, kW = 256;

TEST(CudaInference, MatchesTheCpuReference) {
    SF_REQUIRE_GPU();
    char tmpl[] = "/tmp/sf_cuda_eval_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string ckpt = dir + "/weights.safetensors";
    {
        model::SiderNet net(model::NetShape{1, 2, kH, kW}, rt::MemKind::Host);
        const model::Planner& p = net.plan();
        model::init_parameters(net.table(), 5, p.master(), p.buffers(), p.counters());
        for (size_t i = 0; i < net.table().buffer_floats; ++i) p.buffers()[i] += 0.05f * static_cast<float>(i % 7);
        model::export_weights(ckpt, {&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()});
    }
    tools::TrainConfig cfg;
    cfg.model.input_height = kH;
    cfg.model.input_width = kW;
    tools::TrainConfig cpu_cfg = cfg, gpu_cfg = cfg;
    cpu_cfg.train.backend = tools::Backend::Cpu;
    gpu_cfg.train.backend = tools::Backend::Cuda;
    const tools::CheckpointInfo info = tools::inspect_checkpoint(ckpt);
    tools::InferenceModel cpu(cpu_cfg, kBatch, info), gpu(gpu_cfg, kBatch, info);
    ASSERT_STREQ(gpu.backend(), "cuda");

    data::GenConfig g;
    g.height = kH;
    g.width = kW;
    std::vector<uint8_t> px;
    std::vector<data::Label> lb;
    for (int i = 0; i < kBatch; ++i) {
        const data::GenSample s = data::generate_sample(g, static_cast<uint64_t>(i));
        px.insert(px.end(), s.pixels.begin(), s.pixels.end());
        lb.push_back(s.label);
    }
    kern::preprocess_ref(kBatch, kH, kW, 1, px.data(), lb.data(), cpu.input());
    kern::preprocess_ref(kBatch, kH, kW, 1, px.data(), lb.data(), gpu.input());
    std::vector<model::Decoded> a, b;
    cpu.run(a);
    gpu.run(b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_NEAR(b[i].gap_score, a[i].gap_score, 2e-2 * std::max(1e-3f, a[i].gap_score)) << "sample " << i;
        EXPECT_NEAR(b[i].slider_score, a[i].slider_score, 2e-2 * std::max(1e-3f, a[i].slider_score))
            << "sample " << i;
        std::printf("[eval] sample %zu gap (%.1f, %.1f) vs (%.1f, %.1f)\n", i, a[i].gap_x, a[i].gap_y, b[i].gap_x,
                    b[i].gap_y);
    }
    std::error_code ec;
    if (!std::getenv("SF_KEEP_TEST_FILES")) std::filesystem::remove_all(dir, ec);
}

}  // namespace
