#include "tools/train_args.h"

#include <cstdlib>

#include "runtime/error.h"
#include "tools/train.h"

namespace tools {

namespace {

int parse_count(const std::string& opt, const std::string& v) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    SF_CHECK(!v.empty() && end == v.c_str() + v.size() && n >= 0 && n <= 1000000000L,
             "%s expects an integer >= 0, got '%s'", opt.c_str(), v.c_str());
    return static_cast<int>(n);
}

}  // namespace

TrainArgs parse_train_args(const std::vector<std::string>& args) {
    TrainArgs a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        auto value = [&]() -> const std::string& {
            SF_CHECK(i + 1 < args.size(), "%s needs a value", s.c_str());
            return args[++i];
        };
        if (s == "--config") {
            a.config = value();
        } else if (s == "--out") {
            a.out = value();
        } else if (s == "--resume") {
            a.resume = value();
        } else if (s == "--max-bad-steps") {
            a.max_bad_steps = parse_count(s, value());
        } else if (s == "--allow-config-change") {
            a.allow_config_change = true;
        } else if (s == "--no-graph") {
            a.no_graph = true;
        } else if (s == "--deferred-stats") {
            a.deferred_stats = true;
        } else if (s == "--profile-steps") {
            a.profile = rt::parse_step_range(value());
        } else if (s.rfind("--", 0) == 0) {
            SF_FAIL("unknown option '%s'\n%s", s.c_str(), train_usage().c_str());
        } else {
            SF_CHECK(s.find('=') != std::string::npos, "unexpected argument '%s' (overrides look like key.path=value)",
                     s.c_str());
            a.overrides.push_back(s);
        }
    }
    SF_CHECK(!a.config.empty(), "missing --config PATH\n%s", train_usage().c_str());
    return a;
}

std::string train_usage() {
    return "usage: slidefuse train --config PATH [--out DIR] [--resume auto|PATH] [key.path=value ...]\n"
           "  --config PATH            YAML training config (docs/CONFIG.md)\n"
           "  --out DIR                output folder, checkpoints in DIR/checkpoints (default: the resumed run's,\n"
           "                           else a new <logging.log_dir>/run-<timestamp>)\n"
           "  --resume auto|PATH       continue from a checkpoint (docs/CHECKPOINTS.md); auto: the newest loadable "
           "one\n"
           "                           of the run in --out (without --out: the newest run in logging.log_dir), or a\n"
           "                           new run if there is none\n"
           "  --allow-config-change    resume a checkpoint written under another config (warns)\n"
           "  --max-bad-steps N        consecutive non-finite (skipped) steps tolerated before the run stops with a\n"
           "                           checkpoint and an error (default 20)\n"
           "  --no-graph               CUDA: run each step's calls eagerly instead of replaying the captured graph\n"
           "  --deferred-stats         CPU: read step statistics only at log points, epoch ends and signals, as the\n"
           "                           CUDA backend does (the same outputs; a check of the loop)\n"
           "  --profile-steps A:B      CUDA: cudaProfilerStart before step A, Stop after step B (1-based), for\n"
           "                           nsys --capture-range=cudaProfilerApi / ncu --profile-from-start off\n"
           "  key.path=value           override any config key, e.g. train.batch_size=64 optimizer.betas=[0.9,0.99]\n"
           "SIGINT/SIGTERM/SIGUSR1: finish the step, write a checkpoint, exit 0 (a second signal exits at once with "
           "130).\n"
           "Data parallel: mpirun -np N slidefuse train ... (docs/DISTRIBUTED.md); stop with kill -USR1 <mpirun pid>.";
}

}  // namespace tools
