// `slidefuse check`: the command (tools/check.h). The GPU is looked for first, so a machine without
// one is told at once (exit 2) before seconds of CPU reference work.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tools/bench_report.h"
#include "tools/check.h"
#include "tools/commands.h"

namespace tools {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

nlohmann::json meta_json(const CheckOptions& o, const CheckSetup& s, const std::vector<std::string>& args) {
    std::string cmd = "slidefuse check";
    for (const std::string& a : args) cmd += " " + a;
    nlohmann::json m = {{"tool", "slidefuse"},
                        {"command", cmd},
                        {"commit", detect_git_commit()},
                        {"date", utc_timestamp()},
                        {"mode", o.reference_only ? "reference" : "cuda"},
                        {"config",
                         {{"batch", s.shape.batch},
                          {"height", s.shape.height},
                          {"width", s.shape.width},
                          {"channels", s.shape.channels},
                          {"seed", s.seed},
                          {"deterministic", s.deterministic}}},
                        {"perturb", nullptr},
                        {"bf16_weights", o.bf16_weights},
                        {"comparison", o.end_to_end ? "end-to-end" : "isolated"},
                        {"floor_factor", o.floor_factor}};
    if (!o.perturb.empty()) m["perturb"] = {{"layer", o.perturb}, {"rel", o.perturb_rel}};
    if (!o.reference_only) m["device"] = device_json(rt::query_device_info(0), "");
    return m;
}

void write_json(const std::string& path, const nlohmann::json& j) {
    std::ofstream f(path);
    SF_CHECK(f.good(), "check: cannot write %s", path.c_str());
    f << j.dump(2) << "\n";
    f.close();
    SF_CHECK(f.good(), "check: writing %s failed", path.c_str());
}

}  // namespace

int cmd_check(const std::vector<std::string>& args) {
    for (const std::string& a : args)
        if (a == "--help" || a == "-h") {
            std::printf("%s\n", check_usage().c_str());
            return 0;
        }
    const CheckOptions o = parse_check_args(args);
    if (!o.reference_only) {
        std::string why;
        if (!rt::cuda_device_available(&why)) {
            std::fprintf(stderr, "slidefuse check: no usable GPU: %s\n", why.c_str());
            return kCheckExitNoGpu;
        }
    }
    const auto t_start = Clock::now();
    const CheckSetup s = make_setup(o);
    std::printf("check: %s, batch %d at %dx%d, seed %llu\n",
                o.reference_only ? "CPU reference against itself" : "CUDA against the CPU reference", s.shape.batch,
                s.shape.height, s.shape.width, static_cast<unsigned long long>(s.seed));
    std::fflush(stdout);

    model::SiderNet ref(s.shape, rt::MemKind::Host);
    const NetState init = init_state(ref.table(), s.seed);
    load_state(ref, init);
    std::unique_ptr<model::SiderNet> other;  // reference-only: the second CPU network
    if (o.reference_only) {
        other = std::make_unique<model::SiderNet>(s.shape, rt::MemKind::Host);
        load_state(*other, init);
        if (!o.perturb.empty()) perturb_layer(*other, o.perturb, o.perturb_rel, s.seed);
        if (o.bf16_weights) std::printf("check: %zu conv weights rounded to bf16\n", round_conv_weights_bf16(*other));
    }
    // Isolated (default): the checked step runs first, then the reference computes every layer
    // from the checked step's layer inputs and output gradients, so each tensor's difference is its
    // own layer's (docs/CHECK.md). End to end: two independent steps, differences accumulate.
    const bool isolated = !o.end_to_end;
    auto run_got = [&] { return other ? reference_step(s, *other) : cuda_step(s, ref.table(), init); };
    const char* got_name = other ? "second CPU" : "CUDA (network build and plans included)";
    StepCapture want, got;
    double ref_s = 0, got_s = 0;
    if (isolated) {
        const auto t1 = Clock::now();
        got = run_got();
        got_s = since(t1);
        std::printf("check: %s step %.1f s\n", got_name, got_s);
        std::fflush(stdout);
        const auto t0 = Clock::now();
        want = reference_step(s, ref, &got);
        ref_s = since(t0);
        std::printf("check: CPU reference step (isolated: fed the checked step's values) %.1f s\n\n", ref_s);
    } else {
        const auto t0 = Clock::now();
        want = reference_step(s, ref);
        ref_s = since(t0);
        std::printf("check: CPU reference step %.1f s\n", ref_s);
        std::fflush(stdout);
        const auto t1 = Clock::now();
        got = run_got();
        got_s = since(t1);
        std::printf("check: %s step %.1f s\n\n", got_name, got_s);
    }

    // The precision floor: the reference again with its conv weights rounded to bf16, computed the
    // same way (isolated or end to end).
    std::unique_ptr<StepCapture> floor;
    if (o.floor_factor > 0) {
        const auto t2 = Clock::now();
        floor = std::make_unique<StepCapture>(bf16_floor_step(s, init, isolated ? &got : nullptr));
        std::printf("check: bf16-weights floor step %.1f s\n\n", since(t2));
    }
    const CheckReport r = build_report(want, got, ref.table(), o.tol, floor.get(), o.floor_factor);
    std::fputs(format_report(r).c_str(), stdout);
    if (!o.json.empty()) {
        nlohmann::json meta = meta_json(o, s, args);
        meta["seconds"] = {{"reference_step", ref_s}, {"checked_step", got_s}, {"total", since(t_start)}};
        write_json(o.json, report_json(r, meta));
        std::printf("check: report written to %s\n", o.json.c_str());
    }
    return r.passed() ? 0 : kCheckExitBeyond;
}

}  // namespace tools
