// `slidefuse plan [--height H] [--width W] [--batch N] [--channels C] [--backend cuda|cpu]
// [--json FILE]`: the memory plan without a GPU (tools/plan_report.h).
#include <cstdio>
#include <fstream>

#include "runtime/error.h"
#include "tools/commands.h"
#include "tools/eval_model.h"  // parse_positive_int
#include "tools/plan_report.h"

namespace tools {

const char* plan_usage() {
    return "usage: slidefuse plan [--height H] [--width W] [--batch N] [--channels C] [--backend cuda|cpu] "
           "[--json FILE]\n"
           "  the memory plan (parameters, optimizer state, activations, activation gradients, workspace, bytes\n"
           "  zeroed per micro-step) for an input size and batch, without a GPU.\n"
           "  defaults: 256x512, batch 8, 2 channels, cuda (bf16 activations; cpu: fp32)\n";
}

PlanArgs parse_plan_args(const std::vector<std::string>& args, bool* help) {
    PlanArgs a;
    *help = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            *help = true;
            return a;
        }
        SF_CHECK(s == "--height" || s == "--width" || s == "--batch" || s == "--channels" || s == "--backend" ||
                     s == "--json",
                 "plan: unexpected argument '%s'\n%s", s.c_str(), plan_usage());
        SF_CHECK(i + 1 < args.size(), "plan: %s needs a value\n%s", s.c_str(), plan_usage());
        const std::string& v = args[++i];
        if (s == "--height") a.height = parse_positive_int(s, v);
        if (s == "--width") a.width = parse_positive_int(s, v);
        if (s == "--batch") a.batch = parse_positive_int(s, v);
        if (s == "--channels") a.channels = parse_positive_int(s, v);
        if (s == "--json") a.json = v;
        if (s == "--backend") {
            SF_CHECK(v == "cuda" || v == "cpu", "plan: --backend expects cuda or cpu, got '%s'", v.c_str());
            a.cuda = v == "cuda";
        }
    }
    return a;
}

int cmd_plan(const std::vector<std::string>& args) {
    bool help = false;
    const PlanArgs a = parse_plan_args(args, &help);
    if (help) {
        std::fputs(plan_usage(), stdout);
        return 0;
    }
    const nlohmann::json doc = plan_json(a);  // NetShape::validate names a bad size or channel count
    std::fputs(plan_text(doc).c_str(), stdout);
    if (!a.json.empty()) {
        std::ofstream f(a.json);
        SF_CHECK(f.good(), "plan: cannot write '%s'", a.json.c_str());
        f << doc.dump(2) << "\n";
        SF_CHECK(f.good(), "plan: writing '%s' failed", a.json.c_str());
        std::printf("wrote %s\n", a.json.c_str());
    }
    return 0;
}

}  // namespace tools
