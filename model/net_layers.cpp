// SiderNetT::layer_outputs: every ConvBN and Conv of the network in forward order with its output (the
// per-layer diagnostics of `slidefuse check`; model/net.h).
#include "model/net.h"

namespace model {

// ---- layer outputs (diagnostics), in forward order ----

namespace {

template <class T>
void collect_layers(std::vector<LayerOutput<T>>& v, const ConvBN<T>& c) {
    v.push_back({c.fwd_scope.substr(0, c.fwd_scope.size() - 4), &c.result(), nullptr});  // strip " fwd"
}

template <class T>
void collect_layers(std::vector<LayerOutput<T>>& v, const Conv<T>& c) {
    v.push_back({c.fwd_scope.substr(0, c.fwd_scope.size() - 4), nullptr, &c.out});
}

template <class T>
void collect_layers(std::vector<LayerOutput<T>>& v, const LiteBlock<T>& b) {
    for (const ConvBN<T>* c : {&b.expand, &b.dw, &b.project}) collect_layers(v, *c);
}

template <class T>
void collect_layers(std::vector<LayerOutput<T>>& v, const DSConv<T>& d) {
    collect_layers(v, d.dw);
    collect_layers(v, d.pw);
}

// Fusion::forward order: per destination, its paths in source order, then its smooth.
template <class T>
void collect_layers(std::vector<LayerOutput<T>>& v, const Stage<T>& s) {
    for (const auto& branch : s.branches)
        for (const LiteBlock<T>& b : branch) collect_layers(v, b);
    const Fusion<T>& f = s.fusion;
    for (size_t i = 0; i < f.sum.size(); ++i) {
        for (size_t j = 0; j < f.sum.size(); ++j) {
            if (j == i) continue;
            const FusePath<T>& fp = f.paths[i][j];
            if (fp.up) collect_layers(v, fp.cb);
            for (const DSConv<T>& d : fp.down) collect_layers(v, d);
        }
        collect_layers(v, f.smooth[i]);
    }
}

}  // namespace

template <class T>
std::vector<LayerOutput<T>> SiderNetT<T>::layer_outputs() const {
    std::vector<LayerOutput<T>> v;
    collect_layers(v, stem_.conv1);
    collect_layers(v, stem_.conv2);
    for (const LiteBlock<T>& b : stem_.blocks) collect_layers(v, b);
    collect_layers(v, t2_keep_);
    collect_layers(v, t2_down_);
    collect_layers(v, stage2_);
    collect_layers(v, t3_new_);
    collect_layers(v, stage3_);
    collect_layers(v, t4_new_);
    collect_layers(v, stage4_);
    for (int level = 3; level >= 0; --level) collect_layers(v, fpn_.lateral[level]);
    collect_layers(v, fpn_.smooth_p5);
    for (const WeightedFuse<T>* f : {&fpn_.fuse16, &fpn_.fuse8, &fpn_.fuse4}) collect_layers(v, f->smooth);
    if (merged_heads()) collect_layers(v, merged_.conv1);  // "dual_head.conv1": the four heads' channels
    for (const Head<T>& h : heads_) {
        if (!merged_heads()) collect_layers(v, h.conv1);
        collect_layers(v, h.conv2);
    }
    return v;
}

template std::vector<LayerOutput<float>> SiderNetT<float>::layer_outputs() const;
template std::vector<LayerOutput<kern::bf16>> SiderNetT<kern::bf16>::layer_outputs() const;

}  // namespace model
