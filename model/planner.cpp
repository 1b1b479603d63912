#include "model/planner.h"

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
constexpr size_t kActAlign = 64;  // floats: 256-byte aligned tensors
}  // namespace

Planner::Planner(rt::MemKind kind) : kind_(kind) {}

size_t Planner::reserve_floats(size_t& cursor, size_t n) {
    const size_t off = round_up(cursor, kActAlign);
    cursor = off + n;
    return off;
}

Act Planner::act(const kern::Shape4& s, const char* what) {
    SF_CHECK(s.n > 0 && s.h > 0 && s.w > 0 && s.c > 0, "activation '%s' has an empty shape (%d,%d,%d,%d)", what, s.n,
             s.h, s.w, s.c);
    Act a;
    a.shape = s;
    if (!binding_) {
        reserve_floats(act_floats_, s.numel());
        reserve_floats(act_grad_floats_, s.numel());
        return a;
    }
    a.v = acts_ + reserve_floats(bind_act_, s.numel());
    a.g = act_grads_ + reserve_floats(bind_grad_, s.numel());
    return a;
}

float* Planner::scratch(size_t numel, const char* what) {
    SF_CHECK(numel > 0, "scratch '%s' is empty", what);
    if (!binding_) {
        reserve_floats(act_floats_, numel);
        return nullptr;
    }
    return acts_ + reserve_floats(bind_act_, numel);
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
        return Param{nullptr, nullptr, numel};
    }
    SF_CHECK(bind_param_ < table_.params.size() && table_.params[bind_param_].name == name,
             "binding pass declared parameter '%s' out of order", name.c_str());
    const ParamInfo& p = table_.params[bind_param_++];
    return Param{master() + p.offset, grad() + p.offset, p.numel};
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

void Planner::finish_sizing() {
    SF_CHECK(!binding_, "finish_sizing() called twice");
    params_arena_ = std::make_unique<rt::Arena>("params", kind_);
    buffers_arena_ = std::make_unique<rt::Arena>("buffers", kind_);
    acts_arena_ = std::make_unique<rt::Arena>("activations", kind_);
    grads_arena_ = std::make_unique<rt::Arena>("activation_grads", kind_);
    const size_t p_off = params_arena_->reserve(4 * table_.flat_size * sizeof(float), 256, "flat params");
    const size_t w_off = params_arena_->reserve(table_.flat_size * sizeof(kern::bf16), 256, "bf16 working copy");
    const size_t c_off = buffers_arena_->reserve(table_.counters * sizeof(int64_t), 256, "counters");
    const size_t b_off = buffers_arena_->reserve(table_.buffer_floats * sizeof(float), 256, "running stats");
    const size_t a_off = acts_arena_->reserve(act_floats_ * sizeof(float), 256, "activations");
    const size_t g_off = grads_arena_->reserve(act_grad_floats_ * sizeof(float), 256, "activation grads");
    for (auto* a : {params_arena_.get(), buffers_arena_.get(), acts_arena_.get(), grads_arena_.get()}) a->allocate();
    flat_ = params_arena_->ptr<float>(p_off);
    working_ = params_arena_->ptr<kern::bf16>(w_off);
    counters_ = buffers_arena_->ptr<int64_t>(c_off);
    buffers_ = buffers_arena_->ptr<float>(b_off);
    acts_ = acts_arena_->ptr<float>(a_off);
    act_grads_ = grads_arena_->ptr<float>(g_off);
    binding_ = true;
}

void Planner::finish_binding() {
    SF_CHECK(binding_, "finish_binding() before finish_sizing()");
    SF_CHECK(bind_param_ == table_.params.size() && bind_buffer_idx_ == table_.buffers.size() &&
                 round_up(bind_act_, 1) <= act_floats_ && bind_grad_ <= act_grad_floats_,
             "binding pass did not match the sizing pass (%zu/%zu params, %zu/%zu buffers)", bind_param_,
             table_.params.size(), bind_buffer_idx_, table_.buffers.size());
    for (auto* a : {params_arena_.get(), buffers_arena_.get(), acts_arena_.get(), grads_arena_.get()}) a->seal();
}

size_t Planner::activation_bytes() const { return (act_floats_ + act_grad_floats_) * sizeof(float); }

}  // namespace model
