#include "model/net.h"

#include <cuda_runtime.h>

#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "model/device_util.h"
#include "model/gpu_ops.h"
#include "model/layer_ops.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/lanes.h"
#include "runtime/profile.h"

namespace model {

namespace {
constexpr const char* kHeadNames[4] = {"heatmap_gap", "heatmap_piece", "offset", "angle"};
constexpr int kHeadChannels[4] = {1, 1, 4, 2};

kern::Shape4 level_shape(const NetShape& s, int level) {
    return {s.batch, s.height / (4 << level), s.width / (4 << level), kBranchChannels[level]};
}

// LiteFPN's top-down x2 upsamples (P5s -> 1/16, P4td -> 1/8, P3td -> 1/4), each in its own profiling
// scope (model::OpUse, the per-layer bench table).
constexpr const char* kFpnUp[3] = {"lite_fpn.up_p5", "lite_fpn.up_p4", "lite_fpn.up_p3"};
constexpr const char* kFpnUpFwd[3] = {"lite_fpn.up_p5 fwd", "lite_fpn.up_p4 fwd", "lite_fpn.up_p3 fwd"};
constexpr const char* kFpnUpBwd[3] = {"lite_fpn.up_p5 bwd", "lite_fpn.up_p4 bwd", "lite_fpn.up_p3 bwd"};

template <class T>
void fpn_upsample_forward(const rt::Exec& ex, int k, const ActT<T>& src, const ActT<T>& dst) {
    const rt::Scope scope(ex, kFpnUpFwd[k]);
    ops::upsample_forward(ex, src.shape, 2, src.v, dst.v);
}

template <class T>
void fpn_upsample_backward(const rt::Exec& ex, int k, const ActT<T>& src, const ActT<T>& dst, bool row_loads) {
    const rt::Scope scope(ex, kFpnUpBwd[k]);
    ops::upsample_backward(ex, src.shape, 2, dst.g, src.g, row_loads);
}
}  // namespace

void NetShape::validate() const {
    SF_CHECK(batch >= 1, "batch size must be >= 1, got %d", batch);
    SF_CHECK(channels == 2 || channels == 4, "input channels must be 2 (gray + mask) or 4 (RGB + mask), got %d",
             channels);
    SF_CHECK(height >= 32 && height % 32 == 0, "input height must be a positive multiple of 32, got %d", height);
    SF_CHECK(width >= 32 && width % 32 == 0, "input width must be a positive multiple of 32, got %d", width);
}

void NetShape::validate_for_training() const {
    validate();
    SF_CHECK(static_cast<int64_t>(batch) * (height / 32) * (width / 32) >= 2,
             "batch %d at %dx%d leaves one value per channel at 1/32 resolution; training BatchNorm needs at least "
             "2 (a larger batch or input)",
             batch, height, width);
}

// ---- Stage ----

template <class T>
void Stage<T>::declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, int blocks,
                       UpOrder up_order, bool fuse_expand_dw) {
    lanes = p.lanes();
    branches.resize(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        p.set_lane(lane_of(i));  // the branch's workspace: its lane's
        branches[i].resize(static_cast<size_t>(blocks));
        for (int b = 0; b < blocks; ++b)
            branches[i][static_cast<size_t>(b)].declare(
                p, name + ".branch_" + scale_name(static_cast<int>(i)) + "." + std::to_string(b), in[i],
                fuse_expand_dw);
    }
    p.set_lane(0);
    fusion.declare(p, name + ".fusion", in, up_order);
}

namespace {
// The branches on their lanes' streams: only on CUDA, with the network's lanes, the plan's lanes and no
// per-layer observer (whose scopes time one stream).
template <class T>
bool on_lanes(const Stage<T>& st, const rt::Exec& ex, const rt::StreamLanes* streams) {
    return st.lanes > 1 && streams && ex.is_cuda() && !ex.observer && st.branches.size() > 1;
}
}  // namespace

template <class T>
void Stage<T>::forward(const rt::Exec& ex, const std::vector<const ActT<T>*>& in, bool train,
                       const rt::StreamLanes* streams) const {
    const bool par = on_lanes(*this, ex, streams);
    if (par) streams->fork(ex, lanes_used());
    std::vector<const ActT<T>*> outs;
    for (size_t i = 0; i < branches.size(); ++i) {
        const rt::Exec lex = par ? streams->lane(ex, lane_of(i)) : ex;
        const ActT<T>* x = in[i];
        for (const LiteBlock<T>& b : branches[i]) {
            b.forward(lex, *x, train);
            x = &b.out;
        }
        outs.push_back(x);
    }
    if (par) streams->join(ex, lanes_used());
    fusion.forward(ex, outs, train);
}

template <class T>
void Stage<T>::backward(const rt::Exec& ex, const std::vector<const ActT<T>*>& in,
                        const rt::StreamLanes* streams) const {
    std::vector<const ActT<T>*> outs;
    for (size_t i = 0; i < branches.size(); ++i) outs.push_back(&branches[i].back().out);
    fusion.backward(ex, outs);
    const bool par = on_lanes(*this, ex, streams);
    if (lanes > 1) grad_section_begin();  // the gradient plan keeps the branches' gradients apart
    if (par) streams->fork(ex, lanes_used());
    for (size_t i = branches.size(); i-- > 0;) {
        if (lanes > 1) grad_section_lane(lane_of(i));
        const rt::Exec lex = par ? streams->lane(ex, lane_of(i)) : ex;
        for (size_t b = branches[i].size(); b-- > 0;)
            branches[i][b].backward(lex, b == 0 ? *in[i] : branches[i][b - 1].out);
    }
    if (par) streams->join(ex, lanes_used());
    if (lanes > 1) grad_section_end();
}

// ---- WeightedFuse ----

template <class T>
void WeightedFuse<T>::declare(Planner& p, const std::string& name, const kern::Shape4& s) {
    weight_a = p.param(name + ".weight_a", {1}, false);
    weight_b = p.param(name + ".weight_b", {1}, false);
    fused = p.act<T>(s, "weighted fuse");
    fwd_scope = name + " fwd";
    bwd_scope = name + " bwd";
    p.op_use({name, OpUse::Kind::WeightedFuse, s});
    smooth.declare(p, name + ".smooth", s, s.c, 3, 1, 1, kern::Act::Silu);
    if constexpr (!kIsCpu<T>) {
        ws_floats = kern::fusion_backward_workspace_floats(s.numel());
        ws = p.workspace(ws_floats);
    }
}

template <class T>
void WeightedFuse<T>::forward(const rt::Exec& ex, const ActT<T>& a, const ActT<T>& b, bool train) const {
    {
        const rt::Scope scope(ex, fwd_scope);
        ops::fusion_forward(ex, fused.numel(), a.v, b.v, weight_a.w, weight_b.w, fused.v);
    }
    smooth.forward(ex, fused, train);
}

template <class T>
void WeightedFuse<T>::backward(const rt::Exec& ex, const ActT<T>& a, const ActT<T>& b) const {
    smooth.backward(ex, fused);
    const rt::Scope scope(ex, bwd_scope);
    ops::fusion_backward(ex, fused.numel(), a.v, b.v, weight_a.w, weight_b.w, fused.g, a.g, b.g, weight_a.g,
                         weight_b.g, ws, ws_floats);
}

// ---- SiderNet ----

template <class T>
SiderNetT<T>::SiderNetT(const NetShape& shape, rt::MemKind memory, GradLayout layout)
    : shape_(shape), plan_(memory, false, layout) {
    SF_CHECK(kIsCpu<T>, "the bf16 network runs on CUDA: construct it with a CUDA Exec");
    SF_CHECK(memory != rt::MemKind::Device, "the CPU reference network lives in host memory");
    shape_.validate();
    declare(plan_);  // sizing pass
    plan_grads();
    plan_.finish_sizing();
    declare(plan_);  // binding pass
    plan_.finish_binding();
}

template <class T>
SiderNetT<T>::SiderNetT(const NetShape& shape, const rt::Exec& ex, const kern::ConvPolicy& policy)
    : shape_(shape), plan_(rt::MemKind::Device) {
    SF_CHECK(!kIsCpu<T>, "the CPU reference network (float) has no CUDA constructor");
    SF_CHECK(ex.is_cuda(), "the CUDA network needs a CUDA Exec (got %s)", rt::backend_name(ex.backend));
    shape_.validate();
    ops_ = std::make_unique<GpuOps>(ex, policy);
    plan_.set_gpu_ops(ops_.get());
    if (policy.branch_lanes) {
        plan_.set_lanes(rt::StreamLanes::kMaxLanes);
        lanes_ = std::make_unique<rt::StreamLanes>(rt::StreamLanes::kMaxLanes);
    }
    plan_.set_dw_fused_bn(ops_->dw_fused_bn());
    plan_.set_pw_stats(ops_->pw_stats());
    plan_.set_dw_stats(ops_->dw_stats());
    plan_.set_pw_bn_bwd(ops_->pw_bn_bwd());
    plan_.set_pw_fused_bwd(ops_->pw_fused_bwd());
    plan_.set_head_bn_grad(ops_->head_bn_grad());
    plan_.set_head_bn_dx(ops_->head_bn_dx());
    plan_.set_dw_bn_grad(ops_->dw_bn_grad());
    plan_.set_pw_bn_grad(ops_->pw_bn_grad());
    plan_.set_dw_fused_bwd(policy.dw_fused_bwd);
    declare(plan_);  // sizing pass: records every conv and workspace request
    plan_grads();
    ops_->prepare(plan_.convs());
    plan_.set_extra_workspace_bytes(ops_->workspace_bytes());
    plan_.finish_sizing();
    declare(plan_);  // binding pass
    plan_.finish_binding();
    ops_->bind_workspace(plan_.workspace_base(), plan_.workspace_lane_bytes(), plan_.lanes());
}

template <class T>
SiderNetT<T>::SiderNetT(const NetShape& shape, DryRun dry)
    : shape_(shape), plan_(kIsCpu<T> ? rt::MemKind::Host : rt::MemKind::Device, true) {
    shape_.validate();
    if (!kIsCpu<T> && dry.policy) {
        plan_.set_dw_fused_bn(GpuOps::dw_fused_bn(*dry.policy));
        plan_.set_pw_stats(GpuOps::pw_stats(*dry.policy));
        plan_.set_dw_stats(GpuOps::dw_stats(*dry.policy));
        plan_.set_pw_bn_bwd(GpuOps::pw_bn_bwd(*dry.policy));
        plan_.set_pw_fused_bwd(GpuOps::pw_fused_bwd(*dry.policy));
        plan_.set_head_bn_grad(dry.policy->head_bn_grad);
        plan_.set_head_bn_dx(GpuOps::head_bn_dx(*dry.policy));
        plan_.set_dw_bn_grad(GpuOps::dw_bn_grad(*dry.policy));
        plan_.set_pw_bn_grad(GpuOps::pw_bn_grad(*dry.policy));
        plan_.set_dw_fused_bwd(dry.policy->dw_fused_bwd);
        if (dry.policy->branch_lanes) plan_.set_lanes(rt::StreamLanes::kMaxLanes);
    }
    declare(plan_);
    plan_grads();
}

// The backward runs once on the sizing pass's placeholders with the tape tracing: every op reports
// the gradients it reads and writes and launches nothing (model/layer_ops.h). So the schedule the
// planner sees is backward() itself. Its profiling scopes are recorded with it, so each write is
// known by the layer or op that made it.
template <class T>
void SiderNetT<T>::plan_grads() {
    plan_.tape().begin_trace();
    TraceScopes scopes(plan_.tape());  // ties each traced write to its layer's scope (LayerUse, OpUse)
    rt::Exec ex = rt::Exec::cpu();
    ex.observer = &scopes;
    backward(ex);
    plan_.tape().end_trace();
    plan_.plan_grads();
}

template <class T>
SiderNetT<T>::~SiderNetT() = default;

template <class T>
void SiderNetT<T>::declare(Planner& p) {
    const NetShape& s = shape_;
    p.set_fuse_dw_pw(s.fuse_dw_pw && !kIsCpu<T>);  // the CPU reference never fuses
    p.set_fuse_up_bn(s.fuse_up_bn && !kIsCpu<T>);
    input_.shape = {s.batch, s.height, s.width, s.channels};
    input_.v = p.scratch_as<T>(input_.shape.numel(), "input");
    input_.g = nullptr;

    // Stem: [N,H,W,C] -> [N,H/4,W/4,32]
    stem_.conv1.input_grad = false;
    stem_.conv1.declare(p, "stem.conv1", input_.shape, 32, 3, 2, 1, kern::Act::Silu);
    stem_.conv2.declare(p, "stem.conv2", stem_.conv1.out.shape, 32, 3, 2, 1, kern::Act::Silu);
    stem_.blocks[0].declare(p, "stem.lite_blocks.0", stem_.conv2.out.shape, s.fuse_expand_dw);
    stem_.blocks[1].declare(p, "stem.lite_blocks.1", stem_.blocks[0].out.shape, s.fuse_expand_dw);

    // Stage 2: keep 1/4, new 1/8 branch.
    t2_keep_.declare(p, "stage2.t2_b1_keep", stem_.out().shape, 32, 1, 1, 1, kern::Act::Silu);
    t2_down_.declare(p, "stage2.t2_b2_down", stem_.out().shape, 64, 2);
    stage2_.declare(p, "stage2", {level_shape(s, 0), level_shape(s, 1)}, 2, s.up_order, s.fuse_expand_dw);

    // Stage 3: new 1/16 branch from the 1/8 fusion output.
    t3_new_.declare(p, "stage3.t3_b3_from_1_8", level_shape(s, 1), 128, 2);
    stage3_.declare(p, "stage3", {level_shape(s, 0), level_shape(s, 1), level_shape(s, 2)}, 3, s.up_order, s.fuse_expand_dw);

    // Stage 4: new 1/32 branch from the 1/16 fusion output.
    t4_new_.declare(p, "stage4.t4_b4_from_1_16", level_shape(s, 2), 256, 2);
    stage4_.declare(p, "stage4", {level_shape(s, 0), level_shape(s, 1), level_shape(s, 2), level_shape(s, 3)}, 2,
                    s.up_order, s.fuse_expand_dw);

    // LiteFPN: laterals from 1/32 down to 1/4 (state_dict order), P5 smooth, three weighted fuses.
    for (int level = 3; level >= 0; --level)
        fpn_.lateral[level].declare(p, "lite_fpn.lateral_" + scale_name(level), level_shape(s, level), kFpnChannels, 1,
                                    1, 1, kern::Act::None);
    fpn_.smooth_p5.declare(p, "lite_fpn.smooth_p5", fpn_.lateral[3].out.shape, kFpnChannels, 3, 1, 1, kern::Act::Silu);
    auto fpn_shape = [&](int level) {
        return kern::Shape4{s.batch, s.height / (4 << level), s.width / (4 << level), kFpnChannels};
    };
    // The top-down upsamples' profiling scopes: kFpnUp below (OpUse).
    fpn_.up_p5 = p.act<T>(fpn_shape(2), "fpn up p5");
    p.op_use({kFpnUp[0], OpUse::Kind::Upsample, fpn_shape(3), 2});
    fpn_.fuse16.declare(p, "lite_fpn.fuse_1_16", fpn_shape(2));
    fpn_.up_p4 = p.act<T>(fpn_shape(1), "fpn up p4");
    p.op_use({kFpnUp[1], OpUse::Kind::Upsample, fpn_shape(2), 2});
    fpn_.fuse8.declare(p, "lite_fpn.fuse_1_8", fpn_shape(1));
    fpn_.up_p3 = p.act<T>(fpn_shape(0), "fpn up p3");
    p.op_use({kFpnUp[2], OpUse::Kind::Upsample, fpn_shape(1), 2});
    fpn_.fuse4.declare(p, "lite_fpn.fuse_1_4", fpn_shape(0));

    // Dual head: four independent heads on Hf (CUDA with merge_heads: their conv1 as one layer, each conv2 on
    // its slice of that layer's output).
    // With fuse_head_bn each conv2 applies its conv1's BN + ReLU as it loads conv1's pre-BN output, the conv1 bias
    // folded into that BN (ConvBN::apply_in_consumer, Conv::prologue).
    const bool fuse_bn = fused_head_bn();
    // kern::ConvPolicy::head_bn_grad: the conv2s also gather that BN's backward reductions (ConvBN::sums_by_head).
    const bool head_sums = fuse_bn && p.head_bn_grad();
    // kern::ConvPolicy::head_bn_dx: and store no dx; the conv1 BN's dx pass forms it from their logits' gradients.
    const bool head_dx = head_sums && p.head_bn_dx();
    if (merged_heads()) {
        merged_.conv1.apply_in_consumer = fuse_bn;
        merged_.conv1.sums_by_head = head_sums;
        merged_.declare(p, fpn_.out().shape, kHeadMid);
    }
    for (int h = 0; h < kHeads; ++h) {
        const std::string name = std::string("dual_head.") + kHeadNames[h];
        Head<T>& head = heads_[h];
        if (merged_heads()) {
            merged_.declare_head(p, h, name + ".conv1");
        } else {
            head.conv1.apply_in_consumer = fuse_bn;
            head.conv1.sums_by_head = head_sums;
            head.conv1.declare(p, name + ".conv1", fpn_.out().shape, kHeadMid, 3, 1, 1, kern::Act::Relu, true);
        }
        kern::Shape4 mid = fpn_.out().shape;
        mid.c = kHeadMid;
        head.conv2.in_pitch = merged_heads() ? kHeads * kHeadMid : 0;
        head.conv2.prologue = fuse_bn ? (merged_heads() ? &merged_.conv1 : &head.conv1) : nullptr;
        head.conv2.prologue_channel = fuse_bn && merged_heads() ? h * kHeadMid : 0;
        head.conv2.dx_not_stored = head_dx;
        head.conv2.declare(p, name + ".conv2", mid, kHeadChannels[h]);
        if (head_dx) {
            ConvBN<T>& c1 = merged_heads() ? merged_.conv1 : head.conv1;
            c1.n_dx_heads = merged_heads() ? kHeads : 1;
            c1.dx_heads[merged_heads() ? h : 0] = {&head.conv2.out, &head.conv2.weight, head.conv2.prologue_channel,
                                                   kHeadMid, kHeadChannels[h]};
        }
    }
}

template <class T>
void SiderNetT<T>::forward(const rt::Exec& ex, bool train) {
    // Stem
    stem_.conv1.forward(ex, input_, train);
    stem_.conv2.forward(ex, stem_.conv1.out, train);
    stem_.blocks[0].forward(ex, stem_.conv2.out, train);
    stem_.blocks[1].forward(ex, stem_.blocks[0].out, train);
    // Stage 2
    t2_keep_.forward(ex, stem_.out(), train);
    t2_down_.forward(ex, stem_.out(), train);
    stage2_.forward(ex, {&t2_keep_.out, &t2_down_.out()}, train, lanes_.get());
    // Stage 3
    t3_new_.forward(ex, stage2_.fusion.out(1), train);
    stage3_.forward(ex, {&stage2_.fusion.out(0), &stage2_.fusion.out(1), &t3_new_.out()}, train, lanes_.get());
    // Stage 4
    t4_new_.forward(ex, stage3_.fusion.out(2), train);
    stage4_.forward(ex, {&stage3_.fusion.out(0), &stage3_.fusion.out(1), &stage3_.fusion.out(2), &t4_new_.out()}, train,
                    lanes_.get());
    // LiteFPN
    for (int level = 3; level >= 0; --level) fpn_.lateral[level].forward(ex, stage4_.fusion.out(level), train);
    fpn_.smooth_p5.forward(ex, fpn_.lateral[3].out, train);
    fpn_upsample_forward(ex, 0, fpn_.smooth_p5.out, fpn_.up_p5);
    fpn_.fuse16.forward(ex, fpn_.up_p5, fpn_.lateral[2].out, train);
    fpn_upsample_forward(ex, 1, fpn_.fuse16.smooth.out, fpn_.up_p4);
    fpn_.fuse8.forward(ex, fpn_.up_p4, fpn_.lateral[1].out, train);
    fpn_upsample_forward(ex, 2, fpn_.fuse8.smooth.out, fpn_.up_p3);
    fpn_.fuse4.forward(ex, fpn_.lateral[0].out, fpn_.up_p3, train);
    // Heads
    if (merged_heads()) {
        merged_.forward(ex, fpn_.out(), train);
        for (int h = 0; h < kHeads; ++h) heads_[h].conv2.forward(ex, merged_.slice(h), train);
    } else {
        for (const Head<T>& h : heads_) {
            h.conv1.forward(ex, fpn_.out(), train);
            h.conv2.forward(ex, h.conv1.out, train);
        }
    }
    // CUDA: every BatchNorm's num_batches_tracked advances in one launch (the CPU layers count
    // their own).
    if constexpr (!kIsCpu<T>)
        if (train) increment_counters_cuda(ex, plan_.counters(), plan_.table().counters);
}

template <class T>
void SiderNetT<T>::backward(const rt::Exec& ex) {
    GradTape::Active tape(plan_.tape());  // replays the traced overwrite/accumulate flags
    const bool row_loads = ops_ && ops_->upsample_row_loads();
    if (merged_heads()) {
        merged_.backward(ex, fpn_.out(), heads_);
    } else {
        for (int i = kHeads - 1; i >= 0; --i) {
            heads_[i].conv2.backward(ex, heads_[i].conv1.out);
            heads_[i].conv1.backward(ex, fpn_.out());
        }
    }
    fpn_.fuse4.backward(ex, fpn_.lateral[0].out, fpn_.up_p3);
    fpn_upsample_backward(ex, 2, fpn_.fuse8.smooth.out, fpn_.up_p3, row_loads);
    fpn_.fuse8.backward(ex, fpn_.up_p4, fpn_.lateral[1].out);
    fpn_upsample_backward(ex, 1, fpn_.fuse16.smooth.out, fpn_.up_p4, row_loads);
    fpn_.fuse16.backward(ex, fpn_.up_p5, fpn_.lateral[2].out);
    fpn_upsample_backward(ex, 0, fpn_.smooth_p5.out, fpn_.up_p5, row_loads);
    fpn_.smooth_p5.backward(ex, fpn_.lateral[3].out);
    for (int level = 0; level <= 3; ++level) fpn_.lateral[level].backward(ex, stage4_.fusion.out(level));

    stage4_.backward(ex, {&stage3_.fusion.out(0), &stage3_.fusion.out(1), &stage3_.fusion.out(2), &t4_new_.out()},
                     lanes_.get());
    t4_new_.backward(ex, stage3_.fusion.out(2));
    stage3_.backward(ex, {&stage2_.fusion.out(0), &stage2_.fusion.out(1), &t3_new_.out()}, lanes_.get());
    t3_new_.backward(ex, stage2_.fusion.out(1));
    stage2_.backward(ex, {&t2_keep_.out, &t2_down_.out()}, lanes_.get());
    t2_down_.backward(ex, stem_.out());
    t2_keep_.backward(ex, stem_.out());

    stem_.blocks[1].backward(ex, stem_.blocks[0].out);
    stem_.blocks[0].backward(ex, stem_.conv2.out);
    stem_.conv2.backward(ex, stem_.conv1.out);
    stem_.conv1.backward(ex, input_);
    tape.finish();
}

template <class T>
void SiderNetT<T>::zero_activation_grads(const rt::Exec& ex) {
    const size_t bytes = plan_.act_grad_zero_bytes();
    if (bytes == 0) return;
    if constexpr (kIsCpu<T>)
        kern::fill(ex, bytes / sizeof(float), 0.0f, static_cast<float*>(plan_.act_grad_base()));
    else
        zero_device_async(ex, plan_.act_grad_base(), bytes);
}

template <class T>
HeadLogits<float> SiderNetT<T>::logits() const {
    HeadLogits<float> l;
    l.n = shape_.batch;
    l.h = grid_h();
    l.w = grid_w();
    l.gap = heads_[0].conv2.out.v;
    l.slider = heads_[1].conv2.out.v;
    l.offset = heads_[2].conv2.out.v;
    l.angle = heads_[3].conv2.out.v;
    return l;
}

template <class T>
HeadGrads<float> SiderNetT<T>::logit_grads() const {
    return {heads_[0].conv2.out.g, heads_[1].conv2.out.g, heads_[2].conv2.out.g, heads_[3].conv2.out.g};
}

template <class T>
const ActT<T>& SiderNetT<T>::activation(const std::string& name) const {
    if (name == "stem") return stem_.out();
    if (name == "fpn") return fpn_.out();
    const Stage<T>* stages[3] = {&stage2_, &stage3_, &stage4_};
    for (int s = 0; s < 3; ++s) {
        const std::string prefix = "stage" + std::to_string(s + 2) + ".";
        if (name.rfind(prefix, 0) == 0) {
            const int i = std::stoi(name.substr(prefix.size()));
            SF_CHECK(i >= 0 && i < s + 2, "activation '%s': stage %d has %d branches", name.c_str(), s + 2, s + 2);
            return stages[s]->fusion.out(i);
        }
    }
    SF_FAIL("unknown activation name '%s' (stem, stage2.<i>, stage3.<i>, stage4.<i>, fpn)", name.c_str());
}

template class SiderNetT<float>;
template class SiderNetT<kern::bf16>;

}  // namespace model
