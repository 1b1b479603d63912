// Planner::plan_grads: the activation gradients' liveness plan from the traced backward
// (model/grad_tape.h). A gradient lives from its first access (its first write; -1 when the backward
// reads it before writing it: the logits' gradients, written by the loss before the backward) to
// its last (the last read, in its producer's backward). Shared layout: gradients whose lifetimes
// do not intersect may share bytes; offsets are assigned greedily, largest first, each at the
// lowest 256-aligned offset free of every already placed gradient whose lifetime intersects its own.
#include <algorithm>
#include <numeric>

#include "model/planner.h"
#include "runtime/error.h"

namespace model {

namespace {
constexpr size_t kAlign = 256;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool overlap(const GradSlot& a, const GradSlot& b) { return a.first <= b.last && b.first <= a.last; }

// Lowest offset where `g` fits beside the placed slots it conflicts with.
template <class Conflicts>
size_t first_fit(const GradSlot& g, const std::vector<const GradSlot*>& placed, Conflicts conflicts) {
    std::vector<const GradSlot*> live;
    for (const GradSlot* p : placed)
        if (conflicts(*p)) live.push_back(p);
    std::sort(live.begin(), live.end(), [](const GradSlot* a, const GradSlot* b) { return a->offset < b->offset; });
    size_t off = 0;
    for (const GradSlot* p : live) {
        if (off + g.bytes <= p->offset) break;
        off = std::max(off, round_up(p->offset + p->bytes, kAlign));
    }
    return off;
}
}  // namespace

// The dgrad mode of one traced backward-data on the ConvUse of its shape (the Separate layout
// accumulates every write). The CPU network records no convs (its convolutions need no plans).
void Planner::record_dgrad_mode(const kern::ConvShape& s, bool overwrite) {
    if (convs_.empty()) return;
    for (ConvUse& u : convs_) {
        if (!same_conv_shape(u.shape, s)) continue;
        SF_CHECK(u.dgrad, "the backward trace runs a backward-data of conv n%d %dx%d c%d->%d k%d, declared without one",
                 s.n, s.h, s.w, s.cin, s.cout, s.k);
        (overwrite ? u.dgrad_overwrite : u.dgrad_accumulate) = true;
        return;
    }
    SF_FAIL("the backward trace runs a backward-data of conv %s, which no layer declared", s.describe().c_str());
}

// The layers' and ops' gradient-write modes from the traced scopes (LayerUse::input_grad_accumulates,
// OpUse::grad_writes/grad_accumulates): a write in "<name> bwd" belongs to that layer or op. A trace
// without scopes (no TraceScopes observer) leaves the defaults.
void Planner::record_traced_modes() {
    const std::vector<std::string>& names = tape_.scope_names();
    if (names.empty()) return;
    std::vector<int> writes(names.size(), 0), accs(names.size(), 0);
    std::vector<int> last_acc(names.size(), -1);  // the scope's last write: 1 accumulates, 0 overwrites
    size_t k = 0;                                 // index into write_acc_ (one per traced write)
    for (const GradTape::Event& e : tape_.events()) {
        if (!e.write) continue;
        const bool acc = layout_ == GradLayout::Separate || write_acc_[k++];
        if (e.scope < 0) continue;
        const size_t sc = static_cast<size_t>(e.scope);
        ++writes[sc];
        accs[sc] += acc ? 1 : 0;
        last_acc[sc] = acc ? 1 : 0;
    }
    auto find = [&](const std::string& scope) {
        for (size_t i = 0; i < names.size(); ++i)
            if (names[i] == scope) return static_cast<int>(i);
        return -1;
    };
    for (LayerUse& l : layers_) {
        const int sc = find(l.name + " bwd");
        if (l.input_grad && sc >= 0 && last_acc[static_cast<size_t>(sc)] >= 0)
            l.input_grad_accumulates = last_acc[static_cast<size_t>(sc)] == 1;
    }
    for (OpUse& o : op_uses_) {
        const int sc = find(o.name + " bwd");
        o.grad_writes = sc < 0 ? 0 : writes[static_cast<size_t>(sc)];
        o.grad_accumulates = sc < 0 ? 0 : accs[static_cast<size_t>(sc)];
    }
}

// Parallel sections of the traced backward (GradTape::Section: branch lanes): within a section each lane's
// ops run in order on the lane's stream, but at any time relative to the other lanes' ops. So two gradients
// a section touches from different lanes may be in use at once, whatever their lifetimes in op order, and
// must not share bytes; on one lane (and between a section and the ops before its fork or after its join)
// the op order holds and lifetimes decide as everywhere else. A gradient that stays live across a section
// without being touched in it intersects every lifetime inside it anyway. A gradient two lanes of one
// section both touch would be a race on the GPU: refused. Fills section_lane_[section][slot] (-1: untouched).
void Planner::record_section_lanes(const std::vector<size_t>& event_slot) {
    const std::vector<GradTape::Event>& events = tape_.events();
    const std::vector<GradTape::Section>& sections = tape_.sections();
    section_lane_.assign(sections.size(), std::vector<int>(grads_.size(), -1));
    for (size_t k = 0; k < events.size(); ++k) {
        const GradTape::Event& e = events[k];
        if (e.section < 0) continue;
        std::vector<int>& lane_of = section_lane_[static_cast<size_t>(e.section)];
        const size_t i = event_slot[k];
        SF_CHECK(lane_of[i] < 0 || lane_of[i] == e.lane,
                 "parallel section %d of the backward: gradient '%s' is touched on lanes %d and %d, which run at "
                 "once",
                 e.section, grads_[i].what.c_str(), lane_of[i], e.lane);
        lane_of[i] = e.lane;
    }
}

bool Planner::on_other_lanes(size_t a, size_t b) const {
    for (const std::vector<int>& lane_of : section_lane_)
        if (lane_of[a] >= 0 && lane_of[b] >= 0 && lane_of[a] != lane_of[b]) return true;
    return false;
}

void Planner::plan_grads() {
    SF_CHECK(!binding_ && !grads_planned_, "plan_grads() must run once, between the sizing and binding passes");
    SF_CHECK(tape_.mode() == GradTape::Mode::Idle, "plan_grads() while the backward is being traced");
    const size_t n = grads_.size();
    std::vector<bool> touched(n, false), written(n, false);
    write_slot_.clear();
    write_acc_.clear();
    grad_dgrad_first_ = grad_copies_ = grad_copied_ = 0;
    for (ConvUse& u : convs_) u.dgrad_overwrite = u.dgrad_accumulate = false;
    std::vector<size_t> event_slot;  // per event: its gradient
    event_slot.reserve(tape_.events().size());
    for (const GradTape::Event& e : tape_.events()) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(e.ptr);
        SF_CHECK(p >= kGradPlaceholderBase && (p - kGradPlaceholderBase) % kAlign == 0 &&
                     (p - kGradPlaceholderBase) / kAlign < n,
                 "the backward trace touched %p, which is no activation gradient of this plan", e.ptr);
        const size_t i = (p - kGradPlaceholderBase) / kAlign;
        event_slot.push_back(i);
        GradSlot& g = grads_[i];
        if (!touched[i]) {
            touched[i] = true;
            g.first = e.write ? e.op : -1;
            written[i] = !e.write;  // read first: its value comes from before the backward (the loss)
        }
        g.last = std::max(g.last, e.op);
        if (!e.write) continue;
        write_slot_.push_back(static_cast<int>(i));
        write_acc_.push_back(written[i]);
        if (!written[i] && e.conv_dgrad) grad_dgrad_first_ += g.bytes;
        if (!written[i] && e.copy) {  // y = x: the first contribution of an element-wise accumulate
            ++grad_copies_;
            grad_copied_ += g.bytes;
        }
        if (e.conv_dgrad) record_dgrad_mode(e.conv, !written[i] && layout_ != GradLayout::Separate);
        written[i] = true;
    }
    record_section_lanes(event_slot);
    record_traced_modes();
    act_grad_bytes_ = 0;
    if (layout_ == GradLayout::Separate) {
        for (GradSlot& g : grads_)
            if (g.used()) g.offset = reserve(act_grad_bytes_, g.bytes);
    } else {
        std::vector<size_t> order(n);
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return grads_[a].bytes != grads_[b].bytes ? grads_[a].bytes > grads_[b].bytes
                                                      : grads_[a].first < grads_[b].first;
        });
        std::vector<const GradSlot*> placed;
        for (size_t i : order) {
            GradSlot& g = grads_[i];
            if (!g.used()) continue;
            g.offset = first_fit(g, placed, [&](const GradSlot& p) {
                return overlap(g, p) || on_other_lanes(i, static_cast<size_t>(&p - grads_.data()));
            });
            act_grad_bytes_ = std::max(act_grad_bytes_, g.offset + g.bytes);
            placed.push_back(&g);
        }
    }
    act_grad_bytes_ = round_up(act_grad_bytes_, kAlign);
    grads_planned_ = true;
}

}  // namespace model
