#include "model/grad_tape.h"

#include "runtime/error.h"

namespace model {

namespace {
thread_local GradTape* g_active = nullptr;
}

void GradTape::begin_trace() {
    SF_CHECK(mode_ == Mode::Idle, "GradTape::begin_trace() while a backward is recorded or replayed");
    mode_ = Mode::Trace;
    events_.clear();
    scope_names_.clear();
    scope_stack_.clear();
    sections_.clear();
    section_ = -1;
    lane_ = 0;
    ops_ = 0;
}

void GradTape::begin_section() {
    if (mode_ != Mode::Trace) return;
    SF_CHECK(section_ < 0, "GradTape::begin_section() inside a section (sections do not nest)");
    section_ = static_cast<int>(sections_.size());
    sections_.push_back({ops_, ops_});
    lane_ = 0;
}

void GradTape::set_lane(int k) {
    if (mode_ != Mode::Trace) return;
    SF_CHECK(section_ >= 0, "GradTape::set_lane(%d) outside a section", k);
    SF_CHECK(k >= 0, "GradTape::set_lane(%d): lanes are numbered from 0", k);
    lane_ = k;
}

void GradTape::end_section() {
    if (mode_ != Mode::Trace) return;
    SF_CHECK(section_ >= 0, "GradTape::end_section() without begin_section()");
    sections_[static_cast<size_t>(section_)].end_op = ops_;
    section_ = -1;
    lane_ = 0;
}

void GradTape::enter_scope(const char* name) {
    if (mode_ != Mode::Trace) return;
    int id = -1;
    for (size_t i = 0; i < scope_names_.size() && id < 0; ++i)
        if (scope_names_[i] == name) id = static_cast<int>(i);
    if (id < 0) {
        id = static_cast<int>(scope_names_.size());
        scope_names_.emplace_back(name);
    }
    scope_stack_.push_back(id);
}

void GradTape::leave_scope() {
    if (mode_ != Mode::Trace) return;
    SF_CHECK(!scope_stack_.empty(), "GradTape::leave_scope() without enter_scope()");
    scope_stack_.pop_back();
}

void GradTape::end_trace() {
    SF_CHECK(mode_ == Mode::Trace, "GradTape::end_trace() without begin_trace()");
    SF_CHECK(scope_stack_.empty(), "GradTape::end_trace() with %zu scope(s) still open", scope_stack_.size());
    SF_CHECK(section_ < 0, "GradTape::end_trace() with a parallel section still open");
    mode_ = Mode::Idle;
}

void GradTape::set_replay(std::vector<const void*> targets, std::vector<bool> accumulate, bool accumulate_all) {
    SF_CHECK(targets.size() == accumulate.size(), "GradTape::set_replay: %zu targets, %zu flags", targets.size(),
             accumulate.size());
    targets_ = std::move(targets);
    accumulate_ = std::move(accumulate);
    accumulate_all_ = accumulate_all;
    replay_ready_ = true;
}

bool GradTape::op(std::initializer_list<const void*> reads, std::initializer_list<const void*> writes, bool* acc,
                  const kern::ConvShape* dgrad, bool copy) {
    bool* a = acc;
    if (mode_ == Mode::Trace) {
        const int sc = scope_stack_.empty() ? -1 : scope_stack_.back();
        for (const void* r : reads)
            if (r) events_.push_back({ops_, r, false, false, {}, false, sc, section_, lane_});
        for (const void* w : writes) {
            if (w)
                events_.push_back(
                    {ops_, w, true, dgrad != nullptr, dgrad ? *dgrad : kern::ConvShape{}, copy, sc, section_, lane_});
            *a++ = true;
        }
        ++ops_;
        return false;
    }
    for (const void* w : writes) {
        bool accumulate = true;
        if (w && mode_ == Mode::Replay) {
            SF_CHECK(next_write_ < targets_.size(),
                     "backward writes more activation gradients than its traced schedule (%zu): the backward order "
                     "changed after the plan was made",
                     targets_.size());
            SF_CHECK(w == targets_[next_write_],
                     "backward write %zu targets %p, the plan bound %p there: the backward order changed after the "
                     "plan was made",
                     next_write_, w, targets_[next_write_]);
            accumulate = accumulate_all_ || accumulate_[next_write_];
            ++next_write_;
        }
        *a++ = accumulate;
    }
    return true;
}

GradTape::Active::Active(GradTape& tape) : tape_(tape), prev_(g_active) {
    if (tape_.mode_ != Mode::Trace) {
        SF_CHECK(tape_.replay_ready_, "backward() before the gradient plan was bound");
        tape_.mode_ = Mode::Replay;
        tape_.next_write_ = 0;
    }
    g_active = &tape_;
}

GradTape::Active::~Active() {
    g_active = prev_;
    if (tape_.mode_ == Mode::Replay) tape_.mode_ = Mode::Idle;
}

void GradTape::Active::finish() {
    if (tape_.mode_ != Mode::Replay) return;
    SF_CHECK(tape_.next_write_ == tape_.targets_.size(),
             "backward wrote %zu activation gradients, its traced schedule has %zu: the backward order changed after "
             "the plan was made",
             tape_.next_write_, tape_.targets_.size());
}

bool grad_op(std::initializer_list<const void*> reads, std::initializer_list<const void*> writes, bool* acc,
             const kern::ConvShape* dgrad, bool copy) {
    if (g_active) return g_active->op(reads, writes, acc, dgrad, copy);
    for (size_t i = 0; i < writes.size(); ++i) acc[i] = true;
    return true;
}

void grad_section_begin() {
    if (g_active) g_active->begin_section();
}

void grad_section_lane(int k) {
    if (g_active) g_active->set_lane(k);
}

void grad_section_end() {
    if (g_active) g_active->end_section();
}

}  // namespace model
