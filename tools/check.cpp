// `slidefuse check`: options, the shared setup and the CPU reference run (the CUDA run is in
// tools/check_cuda.cpp, the command in tools/cmd_check.cpp).
#include "tools/check.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "data/generator.h"
#include "kernels/bf16.h"
#include "kernels/preprocess.h"
#include "model/init.h"
#include "runtime/error.h"
#include "tools/config.h"
#include "tools/eval_model.h"
#include "tools/layer_capture.h"
#include "tools/train.h"

namespace tools {

namespace {

double parse_number(const std::string& opt, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    SF_CHECK(!v.empty() && errno == 0 && end && *end == '\0' && x >= lo && x <= hi,
             "%s: expected a number in [%g, %g], got '%s'", opt.c_str(), lo, hi, v.c_str());
    return x;
}

long long parse_seed(const std::string& opt, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    SF_CHECK(!v.empty() && errno == 0 && end && *end == '\0' && x >= 0, "%s: expected an integer >= 0, got '%s'",
             opt.c_str(), v.c_str());
    return x;
}

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

std::string check_usage() {
    return "usage: slidefuse check [--config FILE] [--batch N] [--height H --width W] [--seed S]\n"
           "                       [--tol-rel-l2 X] [--tol-cos Y] [--deterministic] [--json FILE]\n"
           "  One training micro-step of the CUDA backend and of the CPU reference from the same weights\n"
           "  on the same batch; per layer (network order) the forward output, its gradient and the\n"
           "  parameter gradients against the reference (relative L2, cosine), the first tensor beyond\n"
           "  tolerance named (docs/CHECK.md). Exit 0: all within tolerance; 3: one beyond; 2: no usable\n"
           "  GPU; 1: other errors.\n"
           "  --config FILE     training config: model channels/size, loss, train.seed, train.deterministic\n"
           "  --batch N         samples (default 4)\n"
           "  --height/--width  input size (default the config's, 256x512)\n"
           "  --seed S          initial weights and batch (default train.seed)\n"
           "  --tol-rel-l2 X    relative L2 tolerance (default 5e-2)\n"
           "  --tol-cos Y       cosine tolerance (default 0.999)\n"
           "  --deterministic   deterministic cuDNN engines, no autotuning (also train.deterministic)\n"
           "  --json FILE       the report as JSON (schema slidefuse.check/1)\n"
           "  --reference-only  CPU reference against itself (tests the command without a GPU);\n"
           "                    tolerances default to 1e-6 / 1-1e-9 there\n"
           "  --perturb LAYER   with --reference-only: change LAYER's conv weights in the second network\n"
           "  --perturb-rel R   relative size of that change (default 1e-2)\n"
           "  --end-to-end      compare two independent steps (default: isolated: the reference computes\n"
           "                    each layer from the checked backend's inputs and output gradients)\n"
           "  --floor-factor F  a tensor beyond tolerance passes when the reference with bf16-rounded conv\n"
           "                    weights is beyond it too and the result is within F times that floor\n"
           "                    (default 3 on CUDA, off with --reference-only; 0 turns it off)\n"
           "  --bf16-weights    with --reference-only: the second network's conv weights rounded to bf16, as\n"
           "                    the CUDA step's copies are: the differences that rounding alone makes";
}

CheckOptions parse_check_args(const std::vector<std::string>& args) {
    CheckOptions o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--reference-only") {
            o.reference_only = true;
        } else if (s == "--deterministic") {
            o.deterministic = true;
        } else if (s == "--config") {
            o.config = option_value(args, i);
        } else if (s == "--batch") {
            o.batch = parse_positive_int(s, option_value(args, i));
        } else if (s == "--height") {
            o.height = parse_positive_int(s, option_value(args, i));
        } else if (s == "--width") {
            o.width = parse_positive_int(s, option_value(args, i));
        } else if (s == "--seed") {
            o.seed = parse_seed(s, option_value(args, i));
        } else if (s == "--tol-rel-l2") {
            o.tol.rel_l2 = parse_number(s, option_value(args, i), 0, 1e3);
            o.tol_rel_set = true;
        } else if (s == "--tol-cos") {
            o.tol.cosine = parse_number(s, option_value(args, i), -1, 1);
            o.tol_cos_set = true;
        } else if (s == "--json") {
            o.json = option_value(args, i);
        } else if (s == "--perturb") {
            o.perturb = option_value(args, i);
        } else if (s == "--end-to-end") {
            o.end_to_end = true;
        } else if (s == "--floor-factor") {
            o.floor_factor = parse_number(s, option_value(args, i), 0, 100);
        } else if (s == "--bf16-weights") {
            o.bf16_weights = true;
        } else if (s == "--perturb-rel") {
            o.perturb_rel = parse_number(s, option_value(args, i), 0, 1);
        } else {
            SF_FAIL("check: unknown argument '%s'\n%s", s.c_str(), check_usage().c_str());
        }
    }
    SF_CHECK(o.perturb.empty() || o.reference_only,
             "check: --perturb changes the second CPU network: it needs --reference-only");
    SF_CHECK(!o.bf16_weights || o.reference_only,
             "check: --bf16-weights changes the second CPU network: it needs --reference-only");
    if (o.floor_factor < 0) o.floor_factor = o.reference_only ? 0.0 : kDefaultFloorFactor;
    if (o.reference_only) {
        if (!o.tol_rel_set) o.tol.rel_l2 = kReferenceOnlyRelL2;
        if (!o.tol_cos_set) o.tol.cosine = kReferenceOnlyCosine;
    }
    if (!o.json.empty()) check_output_path("--json", o.json);
    return o;
}

CheckSetup make_setup(const CheckOptions& o) {
    const TrainConfig cfg = o.config.empty() ? TrainConfig{} : load_config(o.config, {});
    CheckSetup s;
    s.shape.batch = o.batch;
    s.shape.channels = cfg.model.input_channels;
    s.shape.height = o.height ? o.height : cfg.model.input_height;
    s.shape.width = o.width ? o.width : cfg.model.input_width;
    // The original's order unless the config names one: `check` compares layer by layer, so both
    // networks run the same order (auto resolves as on the CPU reference).
    s.shape.up_order = resolve_up_order(cfg.model.fusion_up_order, Backend::Cpu);
    s.shape.validate_for_training();
    s.loss = loss_config(cfg);
    s.optim = optim_config(cfg);
    s.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : cfg.train.seed;
    s.deterministic = o.deterministic || cfg.train.deterministic;
    data::GenConfig g;
    g.seed = s.seed;
    g.height = s.shape.height;
    g.width = s.shape.width;
    g.channels = s.shape.channels - 1;  // the model input adds the valid mask
    for (int i = 0; i < s.shape.batch; ++i) {
        const data::GenSample gs = data::generate_sample(g, static_cast<uint64_t>(i));
        s.pixels.insert(s.pixels.end(), gs.pixels.begin(), gs.pixels.end());
        s.labels.push_back(gs.label);
    }
    return s;
}

NetState init_state(const model::ParamTable& t, uint64_t seed) {
    NetState s;
    s.master.assign(t.flat_size, 0.0f);
    s.buffers.assign(t.buffer_floats, 0.0f);
    s.counters.assign(t.counters, 0);
    model::init_parameters(t, seed, s.master.data(), s.buffers.data(), s.counters.data());
    return s;
}

void load_state(model::SiderNet& net, const NetState& s) {
    const model::Planner& p = net.plan();
    const model::ParamTable& t = net.table();
    SF_CHECK(s.master.size() == t.flat_size && s.buffers.size() == t.buffer_floats && s.counters.size() == t.counters,
             "check: network state of another table");
    std::copy(s.master.begin(), s.master.end(), p.master());
    std::copy(s.buffers.begin(), s.buffers.end(), p.buffers());
    std::copy(s.counters.begin(), s.counters.end(), p.counters());
}

void perturb_layer(model::SiderNet& net, const std::string& layer, double rel, uint64_t seed) {
    bool known = false;
    for (const model::LayerOutput<float>& l : net.layer_outputs()) known = known || l.name == layer;
    const model::ParamInfo* w = net.table().find(layer + ".conv.weight");
    if (!w) w = net.table().find(layer + ".weight");
    SF_CHECK(known && w,
             "check: --perturb: the network has no layer '%s' (a conv layer's name, e.g. stem.conv1, "
             "stage2.fusion.smooth_1_4, dual_head.offset.conv2)",
             layer.c_str());
    float* p = net.plan().master() + w->offset;
    for (size_t i = 0; i < w->numel; ++i) {
        const double sign = (splitmix64(seed ^ (i * 0x2545f4914f6cdd1dull)) & 1) ? 1.0 : -1.0;
        p[i] = static_cast<float>(p[i] * (1.0 + rel * sign));
    }
}

size_t round_conv_weights_bf16(model::SiderNet& net) {
    size_t n = 0;
    for (const model::ParamInfo& p : net.table().params) {
        if (!p.conv_weight) continue;
        float* w = net.plan().master() + p.offset;
        for (size_t i = 0; i < p.numel; ++i) w[i] = kern::round_bf16(w[i]);
        n += p.numel;
    }
    return n;
}

StepCapture bf16_floor_step(const CheckSetup& s, const NetState& init, const StepCapture* forced) {
    model::SiderNet net(s.shape, rt::MemKind::Host);
    load_state(net, init);
    round_conv_weights_bf16(net);
    return reference_step(s, net, forced);
}

StepCapture reference_step(const CheckSetup& s, model::SiderNet& net, const StepCapture* forced) {
    const model::NetShape& sh = s.shape;
    // The CUDA step sees the preprocessed input in bf16: give the reference exactly that.
    kern::preprocess_ref(sh.batch, sh.height, sh.width, sh.channels - 1, s.pixels.data(), s.labels.data(), net.input());
    const size_t n = static_cast<size_t>(sh.batch) * sh.height * sh.width * sh.channels;
    for (size_t i = 0; i < n; ++i) net.input()[i] = kern::round_bf16(net.input()[i]);
    std::fill(net.plan().grad(), net.plan().grad() + net.table().flat_size, 0.0f);
    CaptureObserver<float> obs(net);
    obs.force_from(forced);
    rt::Exec ex = rt::Exec::cpu();
    ex.observer = &obs;
    model::TrainStep step(net, s.loss, s.optim);
    const model::LossTerms t = step.micro_step(ex, s.labels.data(), 1.0);
    return obs.finish(ex, t);
}

}  // namespace tools
