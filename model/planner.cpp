#include "model/planner.h"

#include <algorithm>

#include "runtime/error.h"

namespace model {

namespace {
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
size_t shape_numel(const std::vector<int64_t>& s) {
    size_t n = 1;
    for (int64_t d : s) {
        SF_CHECK(d > 0, "non-positive dimension %lld", static_cast<long long>(d));
        n *= static_cast<size_t>(d);
    }
    return n;
}
constexpr size_t kActAlign = 256;  // bytes: every tensor starts on a 256-byte boundary
}  // namespace

Planner::Planner(rt::MemKind kind, bool dry_run, GradLayout layout) : kind_(kind), dry_run_(dry_run), layout_(layout) {}

size_t Planner::reserve(size_t& cursor, size_t bytes) {
    const size_t off = round_up(cursor, kActAlign);
    cursor = off + bytes;
    return off;
}

void* Planner::bind(uint8_t* base, size_t& cursor, size_t bytes) { return base + reserve(cursor, bytes); }

template <class T>
ActT<T> Planner::grad_only(const kern::Shape4& s, const char* what) {
    SF_CHECK(s.n > 0 && s.h > 0 && s.w > 0 && s.c > 0, "activation '%s' has an empty shape (%d,%d,%d,%d)", what, s.n,
             s.h, s.w, s.c);
    ActT<T> a;
    a.shape = s;
    const size_t bytes = s.numel() * sizeof(T);
    if (!binding_) {
        SF_CHECK(!grads_planned_, "activation '%s' declared after the gradients were planned", what);
        a.g = reinterpret_cast<T*>(kGradPlaceholderBase + grads_.size() * kActAlign);
        grads_.push_back({what, bytes});
        return a;
    }
    SF_CHECK(bind_grad_ < grads_.size(), "binding pass declared more activations than the sizing pass");
    const GradSlot& g = grads_[bind_grad_++];
    a.g = g.used() ? reinterpret_cast<T*>(act_grads_ + g.offset) : nullptr;
    return a;
}
template ActT<float> Planner::grad_only<float>(const kern::Shape4&, const char*);
template ActT<kern::bf16> Planner::grad_only<kern::bf16>(const kern::Shape4&, const char*);

// grad_only's gradient slot plus the values' bytes in the activation region.
template <class T>
ActT<T> Planner::act(const kern::Shape4& s, const char* what, bool local_grad) {
    (void)local_grad;
    ActT<T> a = grad_only<T>(s, what);
    const size_t bytes = s.numel() * sizeof(T);
    if (!binding_)
        reserve(act_bytes_, bytes);
    else
        a.v = static_cast<T*>(bind(acts_, bind_act_, bytes));
    return a;
}
template ActT<float> Planner::act<float>(const kern::Shape4&, const char*, bool);
template ActT<kern::bf16> Planner::act<kern::bf16>(const kern::Shape4&, const char*, bool);

template <class T>
T* Planner::scratch_as(size_t numel, const char* what) {
    SF_CHECK(numel > 0, "scratch '%s' is empty", what);
    if (!binding_) {
        reserve(act_bytes_, numel * sizeof(T));
        return nullptr;
    }
    return static_cast<T*>(bind(acts_, bind_act_, numel * sizeof(T)));
}
template float* Planner::scratch_as<float>(size_t, const char*);
template kern::bf16* Planner::scratch_as<kern::bf16>(size_t, const char*);

float* Planner::scratch(size_t numel, const char* what) { return scratch_as<float>(numel, what); }

bool same_conv_shape(const kern::ConvShape& a, const kern::ConvShape& b) {
    return a.n == b.n && a.h == b.h && a.w == b.w && a.cin == b.cin && a.cout == b.cout && a.k == b.k &&
           a.stride == b.stride && a.pad == b.pad && a.groups == b.groups && a.bias == b.bias;
}

void check_dgrad_mode(const ConvUse& u, bool accumulate) {
    const kern::ConvShape& s = u.shape;
    SF_CHECK(u.dgrad, "conv %s was planned without an input gradient", s.describe().c_str());
    SF_CHECK(accumulate ? u.needs_accumulate() : u.needs_overwrite(),
             "conv %s: backward-data asked to %s dx, but only the %s mode was prepared "
             "(the traced backward never asked for it: the backward changed after the plan was made)",
             s.describe().c_str(), accumulate ? "accumulate into" : "overwrite",
             accumulate ? "overwrite" : "accumulate");
}

void Planner::conv(const kern::ConvShape& s, bool dgrad, bool bn_prologue, kern::Act prologue_act) {
    if (binding_) return;
    s.validate();
    for (ConvUse& u : convs_) {
        if (same_conv_shape(u.shape, s)) {
            u.dgrad = u.dgrad || dgrad;
            if (bn_prologue && !u.bn_prologue) u.prologue_act = prologue_act;
            u.bn_prologue = u.bn_prologue || bn_prologue;
            return;
        }
    }
    ConvUse u;
    u.shape = s;
    u.dgrad = dgrad;
    u.bn_prologue = bn_prologue;
    u.prologue_act = bn_prologue ? prologue_act : kern::Act::None;
    convs_.push_back(u);
}

namespace {

// The ConvUse a mark applies to: s must have been declared (Planner::conv) first.
ConvUse& declared_conv(std::vector<ConvUse>& convs, const kern::ConvShape& s, const char* op) {
    for (ConvUse& u : convs)
        if (same_conv_shape(u.shape, s)) return u;
    SF_FAIL("%s: convolution %s was not declared (Planner::conv first)", op, s.describe().c_str());
}

}  // namespace

void Planner::conv_bn_backward(const kern::ConvShape& s, kern::Act act) {
    if (binding_) return;
    ConvUse& u = declared_conv(convs_, s, "conv_bn_backward");
    if (!u.bn_bwd_prologue) u.bn_bwd_act = act;
    u.bn_bwd_prologue = true;
}

void Planner::conv_pw_fused_backward(const kern::ConvShape& s) {
    if (binding_) return;
    declared_conv(convs_, s, "conv_pw_fused_backward").pw_fused_bwd = true;
}

void Planner::conv_epilogues(const kern::ConvShape& s, bool stats, bool bn_grad, kern::Act bn_grad_act) {
    if (binding_) return;
    ConvUse& u = declared_conv(convs_, s, "conv_epilogues");
    u.stats_epilogue = u.stats_epilogue || stats;
    if (bn_grad && !u.bn_grad_epilogue) u.bn_grad_act = bn_grad_act;
    u.bn_grad_epilogue = u.bn_grad_epilogue || bn_grad;
}

void Planner::layer(const LayerUse& l) {
    if (!binding_) layers_.push_back(l);
}

void Planner::layer_kernels(const std::string& name, const LayerKernels& k) {
    if (binding_) return;
    SF_CHECK(!layers_.empty() && layers_.back().name == name,
             "planner: the kernel fusions of layer %s come right after the layer itself", name.c_str());
    layers_.back().kernels = k;
}

void Planner::op_use(const OpUse& o) {
    if (!binding_) op_uses_.push_back(o);
}

float* Planner::workspace(size_t floats) {
    if (!binding_) {
        workspace_floats_ = std::max(workspace_floats_, floats);
        return nullptr;
    }
    SF_CHECK(floats <= workspace_floats_, "workspace request of %zu floats after sizing (%zu planned)", floats,
             workspace_floats_);
    return workspace_base(lane_);
}

void Planner::set_lanes(int n) {
    SF_CHECK(!binding_ && workspace_floats_ == 0 && convs_.empty(), "set_lanes() before the sizing pass");
    SF_CHECK(n >= 1 && n <= rt::StreamLanes::kMaxLanes, "set_lanes(%d): 1..%d lanes", n, rt::StreamLanes::kMaxLanes);
    lanes_ = n;
}

void Planner::set_lane(int k) {
    SF_CHECK(k >= 0 && k < lanes_, "set_lane(%d): the plan has %d lane(s)", k, lanes_);
    lane_ = k;
}

float* Planner::workspace_base(int k) const {
    SF_CHECK(k >= 0 && k < lanes_, "workspace_base(%d): the plan has %d lane(s)", k, lanes_);
    return workspace_ ? workspace_ + static_cast<size_t>(k) * workspace_floats_ : nullptr;
}

void Planner::set_extra_workspace_bytes(size_t bytes) {
    SF_CHECK(!binding_, "set_extra_workspace_bytes() after finish_sizing()");
    extra_workspace_bytes_ = std::max(extra_workspace_bytes_, bytes);
}

Param Planner::param(const std::string& name, std::vector<int64_t> torch_shape, bool conv_weight) {
    const size_t numel = shape_numel(torch_shape);
    if (!binding_) {
        SF_CHECK(!table_.find(name), "parameter '%s' declared twice", name.c_str());
        ParamInfo p;
        p.name = name;
        p.torch_shape = std::move(torch_shape);
        p.numel = numel;
        p.offset = table_.flat_size;
        p.conv_weight = conv_weight;
        SF_CHECK(!conv_weight || p.torch_shape.size() == 4, "conv weight '%s' must be 4-D", name.c_str());
        table_.flat_size = round_up(p.offset + numel, kParamAlign);
        table_.params.push_back(std::move(p));
        return Param{nullptr, nullptr, nullptr, numel};
    }
    SF_CHECK(bind_param_ < table_.params.size() && table_.params[bind_param_].name == name,
             "binding pass declared parameter '%s' out of order", name.c_str());
    const ParamInfo& p = table_.params[bind_param_++];
    return Param{master() + p.offset, grad() + p.offset, working_ + p.offset, p.numel};
}

float* Planner::buffer(const std::string& name, std::vector<int64_t> torch_shape) {
    const size_t numel = shape_numel(torch_shape);
    if (!binding_) {
        BufferInfo b;
        b.name = name;
        b.torch_shape = std::move(torch_shape);
        b.numel = numel;
        b.offset = table_.buffer_floats;
        table_.buffer_floats += numel;
        table_.buffers.push_back(std::move(b));
        return nullptr;
    }
    SF_CHECK(bind_buffer_idx_ < table_.buffers.size() && table_.buffers[bind_buffer_idx_].name == name,
             "binding pass declared buffer '%s' out of order", name.c_str());
    return buffers_ + table_.buffers[bind_buffer_idx_++].offset;
}

int64_t* Planner::counter(const std::string& name) {
    if (!binding_) {
        BufferInfo b;
        b.name = name;
        b.numel = 1;
        b.offset = table_.counters++;
        b.counter = true;
        table_.buffers.push_back(std::move(b));
        return nullptr;
    }
    SF_CHECK(bind_buffer_idx_ < table_.buffers.size() && table_.buffers[bind_buffer_idx_].name == name,
             "binding pass declared counter '%s' out of order", name.c_str());
    return counters_ + table_.buffers[bind_buffer_idx_++].offset;
}

MemoryPlan Planner::memory() const {
    MemoryPlan m;
    m.params = round_up(4 * table_.flat_size * sizeof(float), 256) + table_.flat_size * sizeof(kern::bf16);
    m.buffers = round_up(table_.counters * sizeof(int64_t), 256) + table_.buffer_floats * sizeof(float);
    m.activations = act_bytes_;
    for (const GradSlot& g : grads_) {
        if (grads_planned_ && !g.used()) continue;
        ++m.grad_tensors;
        m.grad_unshared += round_up(g.bytes, kActAlign);
    }
    m.activation_grads = grads_planned_ ? act_grad_bytes_ : m.grad_unshared;
    m.grad_zeroed = grads_planned_ ? act_grad_zero_bytes() : m.activation_grads;
    m.grad_dgrad_first = grad_dgrad_first_;
    m.grad_copies = grad_copies_;
    m.grad_copied = grad_copied_;
    m.workspace = std::max(workspace_floats_ * sizeof(float), extra_workspace_bytes_) * static_cast<size_t>(lanes_);
    return m;
}

void Planner::finish_sizing() {
    SF_CHECK(!binding_, "finish_sizing() called twice");
    SF_CHECK(!dry_run_, "a dry-run plan is never allocated");
    SF_CHECK(grads_planned_, "finish_sizing() before plan_grads()");
    // The workspace is one region whatever uses it: reductions take floats, conv plans bytes.
    workspace_floats_ = std::max(workspace_floats_, (extra_workspace_bytes_ + sizeof(float) - 1) / sizeof(float));
    // With branch lanes, one region per lane, each 256-byte aligned (the conv plans' workspace alignment).
    if (lanes_ > 1) workspace_floats_ = (workspace_floats_ + 63) / 64 * 64;
    params_arena_ = std::make_unique<rt::Arena>("params", kind_);
    buffers_arena_ = std::make_unique<rt::Arena>("buffers", kind_);
    acts_arena_ = std::make_unique<rt::Arena>("activations", kind_);
    grads_arena_ = std::make_unique<rt::Arena>("activation_grads", kind_);
    ws_arena_ = std::make_unique<rt::Arena>("workspace", kind_);
    const size_t p_off = params_arena_->reserve(4 * table_.flat_size * sizeof(float), 256, "flat params");
    const size_t w_off = params_arena_->reserve(table_.flat_size * sizeof(kern::bf16), 256, "bf16 working copy");
    const size_t c_off = buffers_arena_->reserve(table_.counters * sizeof(int64_t), 256, "counters");
    const size_t b_off = buffers_arena_->reserve(table_.buffer_floats * sizeof(float), 256, "running stats");
    const size_t a_off = acts_arena_->reserve(act_bytes_, 256, "activations");
    const size_t g_off = grads_arena_->reserve(act_grad_bytes_, 256, "activation grads");
    const size_t s_off = ws_arena_->reserve(
        std::max<size_t>(workspace_floats_ * static_cast<size_t>(lanes_), 1) * sizeof(float), 256, "workspace");
    for (auto* a : {params_arena_.get(), buffers_arena_.get(), acts_arena_.get(), grads_arena_.get(), ws_arena_.get()})
        a->allocate();
    flat_ = params_arena_->ptr<float>(p_off);
    working_ = params_arena_->ptr<kern::bf16>(w_off);
    counters_ = buffers_arena_->ptr<int64_t>(c_off);
    buffers_ = buffers_arena_->ptr<float>(b_off);
    acts_ = acts_arena_->ptr<uint8_t>(a_off);
    act_grads_ = grads_arena_->ptr<uint8_t>(g_off);
    std::vector<const void*> targets;
    for (int slot : write_slot_) targets.push_back(act_grads_ + grads_[static_cast<size_t>(slot)].offset);
    tape_.set_replay(std::move(targets), write_acc_, layout_ == GradLayout::Separate);
    workspace_ = ws_arena_->ptr<float>(s_off);
    binding_ = true;
}

void Planner::finish_binding() {
    SF_CHECK(binding_, "finish_binding() before finish_sizing()");
    SF_CHECK(bind_param_ == table_.params.size() && bind_buffer_idx_ == table_.buffers.size() &&
                 bind_act_ == act_bytes_ && bind_grad_ == grads_.size(),
             "binding pass did not match the sizing pass (%zu/%zu params, %zu/%zu buffers, %zu/%zu activation bytes)",
             bind_param_, table_.params.size(), bind_buffer_idx_, table_.buffers.size(), bind_act_, act_bytes_);
    for (auto* a : {params_arena_.get(), buffers_arena_.get(), acts_arena_.get(), grads_arena_.get(), ws_arena_.get()})
        a->seal();
}

}  // namespace model
