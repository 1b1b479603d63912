#include "model/heads.h"

#include <utility>

#include "kernels/conv.h"
#include "kernels/head_conv_cuda.h"
#include "model/device_util.h"
#include "model/grad_tape.h"
#include "model/layer_ops.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace model {

namespace {

constexpr const char* kMergedName = "dual_head.conv1";
// The gathers and scatters' own profiling scopes (no per-layer row: a few microseconds a step).
constexpr const char* kCopiesFwd = "dual_head.conv1.copies fwd";
constexpr const char* kCopiesBwd = "dual_head.conv1.copies bwd";

// The ranges of one copy_segments_cuda launch, added one by one (at most kMaxCopySegments).
struct Segments {
    CopySegment s[kMaxCopySegments];
    int n = 0;
    void add(const void* src, void* dst, size_t words) {
        SF_CHECK(n < kMaxCopySegments, "merged heads: more than %d copy segments", kMaxCopySegments);
        s[n++] = {src, dst, words};
    }
    void run(const rt::Exec& ex) const { copy_segments_cuda(ex, s, n); }
};

}  // namespace

// ---- Conv (heads' last 1x1, fp32 logits) ----

template <class T>
void Conv<T>::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout) {
    cs = kern::ConvShape{in.n, in.h, in.w, in.c, cout, 1, 1, 0, 1, true};
    cs.validate();
    fwd_scope = name + " fwd";
    bwd_scope = name + " bwd";
    LayerUse use{name, cs, false, kern::Act::None, true};
    // A slice of the merged heads' output: MergedHeads::backward writes the four slices of that gradient as
    // one op, which the trace records in the last head's scope only; the op is the gradient's first write,
    // so every slice overwrites (the cost model's input-gradient mode for the heads without the record).
    if (in_pitch != 0) use.input_grad_accumulates = false;
    SF_CHECK(
        !prologue || (!kIsCpu<T> && prologue->apply_in_consumer && prologue_channel >= 0 &&
                      prologue_channel + in.c <= prologue->cs.cout && prologue->conv.shape.pixels() == in.pixels()),
        "%s: a BN prologue needs a CUDA layer reading channels [%d, %d) of a layer that leaves its BN to it",
        name.c_str(), prologue_channel, prologue_channel + in.c);
    use.input_bn_prologue = prologue != nullptr;
    // kern::ConvPolicy::head_bn_grad: the backward gathers the prologue BN's reductions (the conv1 BN's statistics
    // pass is gone; the cost model moves it here).
    use.kernels.gathers_input_bn_sums = prologue != nullptr && prologue->sums_by_head;
    // kern::ConvPolicy::head_bn_dx: no dx stored (the prologue's BN dx pass forms it; the cost model moves it there).
    SF_CHECK(!dx_not_stored || (prologue && prologue->sums_by_head),
             "%s: a conv storing no dx needs a prologue whose BN reductions it gathers (kern::ConvPolicy::head_bn_dx "
             "with head_bn_grad)",
             name.c_str());
    use.kernels.input_grad_recomputed = dx_not_stored;
    p.layer(use);
    weight = p.param(name + ".weight", {cout, in.c, 1, 1}, true);
    bias = p.param(name + ".bias", {cout}, false);
    out = p.act<float>(cs.out(), "head logits");
    if constexpr (!kIsCpu<T>) {
        ws_floats = kern::head_conv_workspace_floats(cs.in().pixels(), cs.cin, cout);
        ws = p.workspace(ws_floats);
    }
}

template <class T>
const T* Conv<T>::prologue_input() const {
    SF_CHECK(prologue, "%s: no BN prologue", fwd_scope.c_str());
    return prologue->conv.v ? prologue->conv.v + prologue_channel : nullptr;  // null while sizing
}

template <class T>
kern::DwPrologue Conv<T>::input_prologue(bool train) const {
    SF_CHECK(prologue, "%s: no BN prologue", fwd_scope.c_str());
    kern::DwPrologue pro = prologue->dw_prologue(train);
    for (const float** v : {&pro.gamma, &pro.beta, &pro.mean, &pro.invstd})
        if (*v) *v += prologue_channel;  // null while sizing
    return pro;
}

template <class T>
void Conv<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train) const {
    const rt::Scope scope(ex, fwd_scope);
    if constexpr (kIsCpu<T>) {
        kern::conv_forward(ex, cs, x.v, weight.w, bias.w, out.v);
    } else if (prologue) {
        const kern::DwPrologue pro = input_prologue(train);
        kern::head_conv_forward_cuda(ex, cs.in().pixels(), cs.cin, cs.cout, prologue_input(), weight.w, bias.w, out.v,
                                     in_pitch, &pro);
    } else {
        kern::head_conv_forward_cuda(ex, cs.in().pixels(), cs.cin, cs.cout, x.v, weight.w, bias.w, out.v, in_pitch);
    }
}

template <class T>
void Conv<T>::backward(const rt::Exec& ex, const ActT<T>& x) const {
    const rt::Scope scope(ex, bwd_scope);
    if constexpr (kIsCpu<T>) {
        ops::conv_backward_data(ex, cs, out.g, weight.w, x.g);
        ops::conv_backward_filter(ex, cs, x.v, out.g, weight.g, bias.g);
    } else {
        SF_CHECK(in_pitch == 0, "%s: a slice of the merged heads' output runs its backward through MergedHeads",
                 bwd_scope.c_str());
        const kern::DwPrologue pro = prologue ? input_prologue(true) : kern::DwPrologue{};
        // kern::ConvPolicy::head_bn_grad: the conv1 BN's reductions from the dx stored, finalized at once (this
        // conv is that BN's only consumer); the conv1 backward then runs the dx pass alone.
        const bool sums = prologue && prologue->sums_by_head;
        const kern::HeadBnGrad bng = sums ? prologue->head_bn_grad(prologue_channel) : kern::HeadBnGrad{};
        const bool ran = ops::head_conv_backward(
            ex, cs.in().pixels(), cs.cin, cs.cout, prologue ? prologue_input() : x.v, out.g, weight.w, x.g, weight.g,
            bias.g, ws, ws_floats, prologue ? &pro : nullptr, sums ? &bng : nullptr, !dx_not_stored);
        if (sums && ran) prologue->finalize_head_sums(ex);
    }
}

// ---- MergedHeads ----

template <class T>
void MergedHeads<T>::declare(Planner& p, const kern::Shape4& in, int mid_channels) {
    SF_CHECK(!kIsCpu<T>, "the merged heads are CUDA only (the CPU reference keeps four layers)");
    SF_CHECK(mid_channels > 0 && (in.c * 9 * mid_channels) % 2 == 0,
             "merged heads: %d -> %d channels per head (the bf16 weight copies move whole 32-bit words)", in.c,
             mid_channels);
    mid = mid_channels;
    const int cout = kHeads * mid;
    conv1.external_params = true;
    conv1.declare(p, kMergedName, in, cout, 3, 1, 1, kern::Act::Relu, true);
    const size_t wn = static_cast<size_t>(cout) * 9 * in.c, c = static_cast<size_t>(cout);
    conv1.weight = {nullptr, p.scratch(wn, "merged heads weight grad"),
                    p.scratch_as<kern::bf16>(wn, "merged heads weight"), wn};
    for (Param* q : {&conv1.bias, &conv1.gamma, &conv1.beta})
        *q = {p.scratch(c, "merged heads vector"), p.scratch(c, "merged heads vector grad"), nullptr, c};
    conv1.running_mean = p.scratch(c, "merged heads running mean");
    conv1.running_var = p.scratch(c, "merged heads running var");
}

template <class T>
void MergedHeads<T>::declare_head(Planner& p, int h, const std::string& name) {
    SF_CHECK(mid > 0, "%s: MergedHeads::declare first", name.c_str());
    SF_CHECK(h >= 0 && h < kHeads, "merged heads: head %d of %d", h, kHeads);
    const int cin = conv1.cs.cin;
    Own& o = own[h];
    o.weight = p.param(name + ".conv.weight", {mid, cin, 3, 3}, true);
    o.bias = p.param(name + ".conv.bias", {mid}, false);
    o.gamma = p.param(name + ".bn.weight", {mid}, false);
    o.beta = p.param(name + ".bn.bias", {mid}, false);
    o.running_mean = p.buffer(name + ".bn.running_mean", {mid});
    o.running_var = p.buffer(name + ".bn.running_var", {mid});
    p.counter(name + ".bn.num_batches_tracked");  // advanced with every other BN's (increment_counters_cuda)
}

template <class T>
ActT<T> MergedHeads<T>::slice(int h) const {
    SF_CHECK(h >= 0 && h < kHeads, "merged heads: head %d of %d", h, kHeads);
    const ActT<T>& z = conv1.out;
    ActT<T> v;
    v.shape = {z.shape.n, z.shape.h, z.shape.w, mid};
    const size_t at = static_cast<size_t>(h) * static_cast<size_t>(mid);
    v.v = z.v ? z.v + at : nullptr;
    v.g = nullptr;  // written only through backward(), one op for the four slices
    return v;
}

template <class T>
void MergedHeads<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train) const {
    if constexpr (kIsCpu<T>) {
        SF_FAIL("the merged heads are CUDA only");
    } else {
        const size_t m = static_cast<size_t>(mid), wh = conv1.weight.numel / kHeads;
        {
            const rt::Scope scope(ex, kCopiesFwd);
            Segments g;
            for (int h = 0; h < kHeads; ++h) {
                const Own& o = own[h];
                const size_t at = static_cast<size_t>(h) * m;
                g.add(o.weight.h, conv1.weight.h + h * wh, wh / 2);  // bf16 pairs
                g.add(o.bias.w, conv1.bias.w + at, m);
                g.add(o.gamma.w, conv1.gamma.w + at, m);
                g.add(o.beta.w, conv1.beta.w + at, m);
                g.add(o.running_mean, conv1.running_mean + at, m);
                g.add(o.running_var, conv1.running_var + at, m);
            }
            g.run(ex);
        }
        conv1.forward(ex, x, train);
        if (!train) return;
        const rt::Scope scope(ex, kCopiesFwd);
        Segments s;  // the running statistics the train forward updated
        for (int h = 0; h < kHeads; ++h) {
            const size_t at = static_cast<size_t>(h) * m;
            s.add(conv1.running_mean + at, own[h].running_mean, m);
            s.add(conv1.running_var + at, own[h].running_var, m);
        }
        s.run(ex);
    }
}

template <class T>
void MergedHeads<T>::backward(const rt::Exec& ex, const ActT<T>& x, const Head<T> (&heads)[kHeads]) const {
    if constexpr (kIsCpu<T>) {
        SF_FAIL("the merged heads are CUDA only");
    } else {
        const ActT<T>& z = conv1.out;  // with the BN prologue (fuse_head_bn) only its gradient: conv2 reads conv1.conv
        const size_t rows = z.shape.pixels(), m = static_cast<size_t>(mid);
        // The four conv2 backwards write the four slices of z.g: one write for the tape, reported in the scope
        // of the head the backward runs first (the last, as in the unmerged network); each head's launch in its
        // own scope (its per-layer row).
        bool acc = false, run = false;
        for (int h = kHeads - 1; h >= 0; --h) {
            const Conv<T>& c2 = heads[h].conv2;
            SF_CHECK(c2.in_pitch == kHeads * mid && c2.cs.cin == mid, "%s: not a slice of the merged heads' output",
                     c2.bwd_scope.c_str());
            const rt::Scope scope(ex, c2.bwd_scope);
            if (h == kHeads - 1)
                run = grad_op({heads[0].conv2.out.g, heads[1].conv2.out.g, heads[2].conv2.out.g, heads[3].conv2.out.g},
                              {z.g}, &acc);
            if (!run) continue;
            const size_t at = static_cast<size_t>(h) * m;
            SF_CHECK(!c2.prologue || (c2.prologue == &conv1 && c2.prologue_channel == static_cast<int>(at)),
                     "%s: its BN prologue is not its slice of the merged heads' conv1", c2.bwd_scope.c_str());
            const kern::DwPrologue pro = c2.prologue ? c2.input_prologue(true) : kern::DwPrologue{};
            // kern::ConvPolicy::head_bn_grad: each head's columns of the merged BN's reductions (finalized below).
            const kern::HeadBnGrad bng =
                conv1.sums_by_head ? conv1.head_bn_grad(static_cast<int>(at)) : kern::HeadBnGrad{};
            // kern::ConvPolicy::head_bn_dx: the slice not stored (conv1's BN dx pass forms it; the slices' first
            // write, so nothing to add into).
            SF_CHECK(!c2.dx_not_stored || !acc, "%s: a dx not stored cannot accumulate", c2.bwd_scope.c_str());
            kern::head_conv_backward_cuda(ex, rows, mid, c2.cs.cout, c2.prologue ? c2.prologue_input() : z.v + at,
                                          c2.out.g, c2.weight.w, c2.dx_not_stored ? nullptr : z.g + at, c2.weight.g,
                                          c2.bias.g, c2.ws, c2.ws_floats, acc, kHeads * mid,
                                          c2.prologue ? &pro : nullptr, conv1.sums_by_head ? &bng : nullptr);
        }
        // conv1's parameter gradients accumulate into the heads' own: gathered before, scattered after (the
        // traced backward, on a CPU Exec, launches nothing).
        const size_t wh = conv1.weight.numel / kHeads;
        Segments in, out;
        for (int h = 0; h < kHeads; ++h) {
            const Own& o = own[h];
            const size_t at = static_cast<size_t>(h) * m;
            const std::pair<float*, float*> pairs[4] = {{o.weight.g, conv1.weight.g + h * wh},
                                                        {o.bias.g, conv1.bias.g + at},
                                                        {o.gamma.g, conv1.gamma.g + at},
                                                        {o.beta.g, conv1.beta.g + at}};
            for (int k = 0; k < 4; ++k) {
                const size_t words = k == 0 ? wh : m;
                in.add(pairs[k].first, pairs[k].second, words);
                out.add(pairs[k].second, pairs[k].first, words);
            }
        }
        if (ex.is_cuda()) {
            const rt::Scope scope(ex, kCopiesBwd);
            in.run(ex);
        }
        // The four heads' columns of the BN's reductions, into the gathered dgamma, dbeta (conv1's scope).
        if (conv1.sums_by_head && run) {
            const rt::Scope scope(ex, conv1.bwd_scope);
            conv1.finalize_head_sums(ex);
        }
        conv1.backward(ex, x);
        if (ex.is_cuda()) {
            const rt::Scope scope(ex, kCopiesBwd);
            out.run(ex);
        }
    }
}

template struct Conv<float>;
template struct Conv<kern::bf16>;
template struct MergedHeads<float>;
template struct MergedHeads<kern::bf16>;

}  // namespace model
