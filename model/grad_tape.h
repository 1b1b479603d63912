// GradTape: the backward schedule of the activation gradients, taken from backward() itself.
// Every op of a backward that reads or writes an activation gradient goes through model/layer_ops.h,
// which reports it here (grad_op) before launching anything. The tape has three modes:
//   Trace      once, after the planner's sizing pass: SiderNetT::backward runs with nothing
//              launched (grad_op returns false); gradients are named by the distinct placeholder
//              pointers the sizing pass handed out. The planner turns the events into lifetimes
//              (first write .. last read) and shares memory between gradients that never live at
//              the same time (Planner::plan_grads).
//   Replay     every real backward: the k-th write gets the traced flag (its first contribution
//              overwrites, later ones accumulate) and must target the pointer the plan bound for
//              that tensor, so a backward whose order drifts from the plan fails loudly.
//              With accumulate_all (the reference layout: every gradient its own region, zeroed
//              before each micro-step) every write accumulates, the old contract.
// No active tape (an op called outside SiderNetT::backward): accumulate, nothing recorded.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "runtime/profile.h"

namespace model {

class GradTape {
public:
    enum class Mode { Idle, Trace, Replay };
    // One traced access: op index (ops in backward order), the placeholder pointer, write or read,
    // and for a write by a convolution's backward-data whether it was that op kind, and its conv
    // shape (the planner records per conv which dgrad modes the step needs: model::ConvUse); for a
    // write by an element-wise y (+)= x, `copy` (its first contribution is a plain copy of x: the
    // planner counts those bytes, MemoryPlan::grad_copied); `scope`: the innermost rt::Scope open
    // around the op while tracing (an index into scope_names(); -1: none, or traced without a
    // TraceScopes observer), which ties each write to the layer or op that made it.
    struct Event {
        int op = 0;
        const void* ptr = nullptr;
        bool write = false;
        bool conv_dgrad = false;
        kern::ConvShape conv;  // valid when conv_dgrad
        bool copy = false;
        int scope = -1;
        int section = -1;  // the parallel section the op is in (sections()), -1: none
        int lane = 0;      // its lane in that section
    };
    // A parallel section: ops [first_op, end_op) run on the lanes set_lane() named while tracing (each
    // lane's ops in order, different lanes' ops at once: rt::StreamLanes). The planner never lets two
    // gradients the section touches from different lanes share bytes (Planner::plan_grads).
    struct Section {
        int first_op = 0, end_op = 0;
    };

    void begin_trace();
    void end_trace();  // back to Idle; events() holds the schedule
    const std::vector<Event>& events() const { return events_; }
    int ops() const { return ops_; }
    // The profiling scopes seen while tracing (TraceScopes below), in order of first appearance.
    const std::vector<std::string>& scope_names() const { return scope_names_; }
    void enter_scope(const char* name);  // tracing only: later events carry this scope
    void leave_scope();
    // Tracing only (no-ops otherwise): the ops from begin_section() to end_section() form a parallel
    // section; set_lane(k) names the lane of the ops that follow (0 at the section's start).
    void begin_section();
    void set_lane(int k);
    void end_section();
    const std::vector<Section>& sections() const { return sections_; }

    // After the plan is bound: per traced write (in order), the real pointer it targets and whether
    // it accumulates. accumulate_all: every write accumulates (the reference layout).
    void set_replay(std::vector<const void*> targets, std::vector<bool> accumulate, bool accumulate_all);

    Mode mode() const { return mode_; }
    // One op: reads `reads`, writes `writes` (null entries skipped). acc[i] receives whether
    // writes[i] must accumulate. Returns false when the op must not run (tracing). dgrad: the conv
    // shape when the op is a convolution's backward-data; copy: the op is y (+)= x (model::ops::accumulate).
    bool op(std::initializer_list<const void*> reads, std::initializer_list<const void*> writes, bool* acc,
            const kern::ConvShape* dgrad = nullptr, bool copy = false);

    // Makes this tape the active one for the current thread for the lifetime of the guard; a tape
    // that is not tracing starts a replay, and finish() checks every traced write happened.
    class Active {
    public:
        explicit Active(GradTape& tape);
        ~Active();
        Active(const Active&) = delete;
        Active& operator=(const Active&) = delete;
        void finish();  // throws when the backward wrote fewer gradients than the schedule

    private:
        GradTape& tape_;
        GradTape* prev_;
    };

private:
    Mode mode_ = Mode::Idle;
    bool replay_ready_ = false, accumulate_all_ = false;
    int ops_ = 0;
    size_t next_write_ = 0;
    std::vector<Event> events_;
    std::vector<std::string> scope_names_;
    std::vector<int> scope_stack_;
    std::vector<Section> sections_;
    int section_ = -1, lane_ = 0;  // the open section while tracing (-1: none) and its current lane
    std::vector<const void*> targets_;
    std::vector<bool> accumulate_;
};

// Passes the rt::Scopes a traced backward opens to its tape (an Exec observer for the trace only).
class TraceScopes final : public rt::ScopeObserver {
public:
    explicit TraceScopes(GradTape& tape) : tape_(tape) {}
    void begin(const rt::Exec&, const char* name) override { tape_.enter_scope(name); }
    void end(const rt::Exec&, const char*) override { tape_.leave_scope(); }

private:
    GradTape& tape_;
};

// The op reporting entry point of model/layer_ops.h: the active tape's op(), or (no tape) every
// write accumulates and the op runs.
bool grad_op(std::initializer_list<const void*> reads, std::initializer_list<const void*> writes, bool* acc,
             const kern::ConvShape* dgrad = nullptr, bool copy = false);

// The active tape's begin_section / set_lane / end_section (no-ops without an active tape): the network's
// parallel sections (branch lanes) mark themselves on the schedule this way.
void grad_section_begin();
void grad_section_lane(int k);
void grad_section_end();

}  // namespace model
