// The small network and step of the CUDA step tests (tests/gpu/model_step_cuda_test.cpp,
// tests/gpu/model_step_nccl_test.cpp): batch 4 at 64x128 (the multi-step tests: 2 at 32x64 under
// the CPU emulation), generated batches, a CUDA network + step
// with a CPU network's initial weights and one device slot.
#pragma once
#include <cuda_runtime.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "data/generator.h"
#include "kernels/conv_cudnn.h"
#include "model/init.h"
#include "model/train_step_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"

namespace steprig {

constexpr uint64_t kInitSeed = 1234;
// GpuRig's `fuse` bits: the network's BatchNorm fusions (model::NetShape).
constexpr int kFuseExpandDw = 1;  // fuse_expand_dw: the expand's BN + SiLU inside the depthwise conv
constexpr int kFuseDwPw = 2;      // fuse_dw_pw: the depthwise BN + SiLU inside the following 1x1 conv
constexpr int kMergeHeads = 4;    // merge_heads: the four heads' conv1 as one ConvBN (model/heads.h)
constexpr int kFuseHeadBn = 8;    // fuse_head_bn: the heads' conv1 BN + ReLU inside their conv2, the bias folded
constexpr int kFuseUpBn = 16;     // fuse_up_bn: the up paths' upsample inside their BN passes' loads

// The one-micro-step comparison's shape (CudaStep.OneMicroStep): batch 4 at 64x128.
inline model::NetShape full_shape() { return {4, 2, 64, 128}; }
// The multi-step tests' shape: the same on a GPU; under the CPU emulation (docs/EMULATION.md) half
// the batch at a quarter of the pixels, a step then takes seconds there instead of ~40 s.
inline model::NetShape net_shape() {
#ifdef SF_EMU
    return {2, 2, 32, 64};
#else
    return full_shape();
#endif
}

// `batches` generated batches: uint8 gray pixels (N,H,W,1) and labels.
struct HostBatches {
    std::vector<std::vector<uint8_t>> pixels;
    std::vector<std::vector<data::Label>> labels;
};

inline HostBatches make_batches(int batches, const model::NetShape& shape = net_shape()) {
    HostBatches b;
    data::GenConfig gc;
    gc.seed = 7;
    gc.height = shape.height;
    gc.width = shape.width;
    for (int k = 0; k < batches; ++k) {
        std::vector<uint8_t> px;
        std::vector<data::Label> lb;
        for (int i = 0; i < shape.batch; ++i) {
            const data::GenSample s = data::generate_sample(gc, static_cast<uint64_t>(k * shape.batch + i));
            px.insert(px.end(), s.pixels.begin(), s.pixels.end());
            lb.push_back(s.label);
        }
        b.pixels.push_back(std::move(px));
        b.labels.push_back(std::move(lb));
    }
    return b;
}

inline model::OptimConfig optim() {
    model::OptimConfig o;
    o.adamw.lr = 1e-3;
    return o;
}

inline model::LrSchedule constant_lr(double lr) {
    model::LrSchedule s;
    s.sgdr = false;
    s.base_lr = lr;
    s.eta_min = lr;  // warmup_cosine with eta_min = base: constant
    s.total_steps = 1000;
    return s;
}

// A CUDA network + step with the CPU net's initial weights, and device slots for the batches.
struct GpuRig {
    rt::CudaContext ctx{0};
    rt::Exec exec;  // the network's and step's: ctx's, with rt::Exec::pdl as asked
    model::SiderNetCuda net;
    model::CudaTrainStep step;
    rt::Arena slots{"test slots", rt::MemKind::Device};
    uint8_t* pixels = nullptr;
    data::Label* labels = nullptr;

    // order: the CUDA network's fusion up-path order (the CPU network's own may differ: same weights);
    // fuse: the network's BN fusions, kFuseExpandDw (NetShape::fuse_expand_dw, the fused LiteBlock; `true`
    // converts to it), kFuseDwPw (NetShape::fuse_dw_pw), kMergeHeads (NetShape::merge_heads), kFuseHeadBn
    // (NetShape::fuse_head_bn) and/or kFuseUpBn (NetShape::fuse_up_bn); bn_row_batch: the
    // BatchNorm row kernels' rows per loop turn (kern::ConvPolicy::bn_row_batch); pdl: the project's kernels with
    // programmatic dependent launch (rt::Exec::pdl); dw_fused: the stride-1 depthwise backward fused
    // (1: kern::ConvPolicy::dw_fused_bwd; 2: also dw_fused_bn_bwd, the BN's dx inside it; 3: 1 with
    // dw_fused_bn_grad, the fused LiteBlock's expand BN reductions in it; 4: 2 with that); pw_custom: the
    // project's 1x1 conv as a candidate (1: kern::ConvPolicy::pw_custom; 2: also pw_stats; 3: 1 with
    // pw_bn_grad, the depthwise BN reductions in its dgrad's epilogue; 4: 2 with that); dw_stats: the
    // depthwise ConvBNs' BN statistics from the staged depthwise forward's epilogue (kern::ConvPolicy::dw_stats).
    explicit GpuRig(const model::SiderNet& init, bool deterministic = true, int accum = 1,
                    model::UpOrder order = model::UpOrder::UpsampleFirst, int fuse = 0,
                    int bn_row_batch = 1, bool pdl = false, int dw_fused = 0, int pw_custom = 0,
                    bool dw_stats = false)
        : GpuRig(init, policy(deterministic, bn_row_batch, dw_fused, pw_custom, dw_stats), accum, order, fuse, pdl) {}
    // With an explicit policy (the switches the parameters above do not name: start from policy(...)).
    GpuRig(const model::SiderNet& init, const kern::ConvPolicy& conv_policy, int accum, model::UpOrder order, int fuse,
           bool pdl = false)
        : exec(with_pdl(ctx.exec(), pdl)),
          net(with_order(init.shape(), order, fuse), exec, conv_policy),
          step(net, exec, model::LossConfig{}, optim(), constant_lr(1e-3), accum) {
        const model::NetShape& sh = init.shape();
        const size_t po = slots.reserve(static_cast<size_t>(sh.batch) * sh.height * sh.width, 256, "pixels");
        const size_t lo = slots.reserve(static_cast<size_t>(sh.batch) * sizeof(data::Label), 256, "labels");
        slots.allocate();
        slots.seal();
        pixels = slots.ptr<uint8_t>(po);
        labels = slots.ptr<data::Label>(lo);
        step.bind_slot(0, pixels, labels);
        const model::Planner& p = init.plan();
        model::CheckpointView v{&init.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()};
        step.upload(v);
    }
    // Deterministic engines and no autotuning (as train.deterministic): two rigs then pick the same
    // cuDNN engines and custom kernels, which the bitwise comparison of two rigs needs.
    static kern::ConvPolicy policy(bool deterministic, int bn_row_batch, int dw_fused, int pw_custom,
                                   bool dw_stats = false) {
        kern::ConvPolicy p = kern::run_conv_policy(deterministic);
        p.bn_row_batch = bn_row_batch;
        p.dw_fused_bwd = dw_fused >= 1;
        p.dw_fused_bn_bwd = dw_fused == 2 || dw_fused == 4;
        p.dw_fused_bn_grad = dw_fused >= 3;
        p.pw_custom = pw_custom >= 1;
        p.pw_stats = pw_custom == 2 || pw_custom == 4;
        p.pw_bn_grad = pw_custom >= 3;
        p.dw_stats = dw_stats;
        return p;
    }
    static rt::Exec with_pdl(rt::Exec ex, bool pdl) {
        ex.pdl = pdl;
        return ex;
    }
    static model::NetShape with_order(model::NetShape s, model::UpOrder o, int fuse) {
        s.up_order = o;
        s.fuse_expand_dw = (fuse & kFuseExpandDw) != 0;
        s.fuse_dw_pw = (fuse & kFuseDwPw) != 0;
        s.merge_heads = (fuse & kMergeHeads) != 0;
        s.fuse_head_bn = (fuse & kFuseHeadBn) != 0;
        s.fuse_up_bn = (fuse & kFuseUpBn) != 0;
        return s;
    }
    // On the compute stream (non-blocking: a legacy-stream cudaMemcpy would not be ordered against
    // the step), after the arena's zero fill and the previous step, finished before returning.
    void load(const std::vector<uint8_t>& px, const std::vector<data::Label>& lb) {
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        SF_CUDA_CHECK(cudaMemcpyAsync(pixels, px.data(), px.size(), cudaMemcpyHostToDevice, ctx.exec().stream));
        SF_CUDA_CHECK(cudaMemcpyAsync(labels, lb.data(), lb.size() * sizeof(data::Label), cudaMemcpyHostToDevice,
                                      ctx.exec().stream));
        ctx.synchronize();
    }
    // One training step on a host batch: loaded, a micro-step on slot 0, the optimizer step, finished.
    void train_step(const std::vector<uint8_t>& px, const std::vector<data::Label>& lb) {
        load(px, lb);
        step.micro_step(0);
        step.optimizer_step();
        ctx.synchronize();
    }
    template <class T>
    std::vector<T> fetch(const T* dev, size_t n) {
        std::vector<T> h(n);
        SF_CUDA_CHECK(cudaMemcpyAsync(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost, ctx.exec().stream));
        ctx.synchronize();
        return h;
    }
};

// An eval forward of each rig on its current input, then check(head, a's logits, b's logits) for each of
// the four heads (heatmap_gap, heatmap_piece, offset, angle).
template <class Check>
inline void compare_eval_logits(GpuRig& a, GpuRig& b, Check check) {
    for (GpuRig* r : {&a, &b}) {
        r->net.forward(r->ctx.exec(), false);
        r->ctx.synchronize();
    }
    const model::HeadLogits<float> la = a.net.logits(), lb = b.net.logits();
    const size_t cells = static_cast<size_t>(la.n) * la.h * la.w;
    const std::pair<const float*, const float*> heads[] = {
        {la.gap, lb.gap}, {la.slider, lb.slider}, {la.offset, lb.offset}, {la.angle, lb.angle}};
    const size_t widths[] = {1, 1, 4, 2};
    for (int h = 0; h < 4; ++h) {
        const size_t m = cells * widths[h];
        check(h, a.fetch(heads[h].first, m), b.fetch(heads[h].second, m));
    }
}

// Two rigs after the same steps: master weights, AdamW moments, running statistics, counters, loss,
// gradient norm and applied-step count the same bits; then an eval forward of each on its current
// input gives the same logits of every head (gtest failures otherwise).
inline void expect_rigs_bitwise_equal(GpuRig& a, GpuRig& b) {
    const model::Planner& pa = a.net.plan();
    const model::Planner& pb = b.net.plan();
    const size_t n = pa.table().flat_size;
    ASSERT_EQ(n, pb.table().flat_size);
    const char* names[] = {"master weights", "adam m", "adam v"};
    int i = 0;
    for (auto get : {&model::Planner::master, &model::Planner::adam_m, &model::Planner::adam_v}) {
        const std::vector<float> x = a.fetch((pa.*get)(), n), y = b.fetch((pb.*get)(), n);
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), n * sizeof(float))) << names[i++];
    }
    const std::vector<float> ra = a.fetch(pa.buffers(), pa.table().buffer_floats);
    const std::vector<float> rb = b.fetch(pb.buffers(), pb.table().buffer_floats);
    EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float))) << "running statistics";
    EXPECT_EQ(a.fetch(pa.counters(), pa.table().counters), b.fetch(pb.counters(), pb.table().counters));
    const model::CudaStepStats sa = a.step.read_stats(), sb = b.step.read_stats();
    EXPECT_EQ(sa.loss.total, sb.loss.total);
    EXPECT_EQ(sa.grad_norm, sb.grad_norm);
    EXPECT_EQ(sa.steps_applied, sb.steps_applied);
    compare_eval_logits(a, b, [](int h, const std::vector<float>& x, const std::vector<float>& y) {
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "eval logits of head " << h;
    });
}

// Relative L2 distance of a from b (absolute when b is zero).
inline double rel_l2(const float* a, const float* b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; ++i) {
        d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        r += static_cast<double>(b[i]) * b[i];
    }
    return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

// A switch that only changes a summation order (a BN-backward epilogue), against the same network
// without it: the same gradient plan; after one micro-step of each on batch 0 of b, the same loss (the
// forward is untouched), some gradient not bitwise equal (the switch ran), each parameter's gradient
// within relative L2 `per_tensor` of the base's and the whole flat gradient within `overall`.
inline void expect_changed_order_only(GpuRig& base, GpuRig& other, const HostBatches& b, const std::string& what,
                                      double per_tensor, double overall) {
    const std::vector<model::GradSlot>& sa = base.net.plan().grad_slots();
    const std::vector<model::GradSlot>& sb = other.net.plan().grad_slots();
    ASSERT_EQ(sa.size(), sb.size()) << what;
    for (size_t i = 0; i < sa.size(); ++i)
        EXPECT_TRUE(sa[i].first == sb[i].first && sa[i].last == sb[i].last && sa[i].offset == sb[i].offset)
            << what << ": " << sa[i].what << " " << i;
    for (GpuRig* r : {&base, &other}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    EXPECT_EQ(other.step.read_stats().loss.total, base.step.read_stats().loss.total) << what;
    const model::ParamTable& t = base.net.plan().table();
    const std::vector<float> ga = base.fetch(base.net.plan().grad(), t.flat_size);
    const std::vector<float> gb = other.fetch(other.net.plan().grad(), t.flat_size);
    int differing = 0;
    double worst = 0;
    std::string worst_name;
    for (const model::ParamInfo& p : t.params) {
        differing += std::memcmp(ga.data() + p.offset, gb.data() + p.offset, p.numel * sizeof(float)) != 0;
        const double r = rel_l2(gb.data() + p.offset, ga.data() + p.offset, p.numel);
        EXPECT_LE(r, per_tensor) << what << ": " << p.name;
        if (r > worst) {
            worst = r;
            worst_name = p.name;
        }
    }
    const double all = rel_l2(gb.data(), ga.data(), t.flat_size);
    std::printf("[step] %s: %d of %zu gradients differ from the network without it; relative L2 %.3g overall, "
                "worst %.3g (%s)\n",
                what.c_str(), differing, t.params.size(), all, worst, worst_name.c_str());
    EXPECT_GT(differing, 0) << what << ": no gradient changed (did the switch run?)";
    EXPECT_LE(all, overall) << what;
}

inline void init_cpu(model::SiderNet& net) {
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), kInitSeed, p.master(), p.buffers(), p.counters());
}

}  // namespace steprig
