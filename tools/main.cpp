// slidefuse: command-line entry point. Each subcommand throws rt::Error on bad input; main
// prints one clear line and exits 1.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/commands.h"
#include "tools/train.h"

namespace {

const char* kUsage =
    "slidefuse — training backend for the Sider_CAPTCHA_Solver 1.1 model\n"
    "usage: slidefuse <command> [options]\n"
    "commands:\n"
    "  train     train the model (slidefuse train --help)\n"
    "  generate  make a synthetic slider-CAPTCHA dataset as compact shards (slidefuse generate --help)\n"
    "  convert   convert the original's NPY dataset to compact shards (slidefuse convert --help)\n"
    "  eval      evaluate a checkpoint on a dataset split (slidefuse eval --help)\n"
    "  predict   locate gap and slider in images with a checkpoint (slidefuse predict --help)\n"
    "  export    write a checkpoint's weights for PyTorch (slidefuse export --help)\n"
    "  bench     benchmarks: bench step, bench loader (slidefuse bench --help)\n"
    "  devices   the CUDA devices and whether this build runs on them (slidefuse devices --help)\n"
    "  plan      the memory plan for an input size and batch, no GPU needed (slidefuse plan --help)\n"
    "  check     one CUDA training micro-step against the CPU reference, layer by layer (slidefuse check --help)\n"
    "  version   print the version\n";

// Launched by mpirun/srun: MPI up, and the ranks other than 0 quiet (warnings and errors only,
// each line naming its rank; rank 0 prints the console story). Returns false after printing an error.
bool start_distributed() {
    try {
        rt::init_distributed();
    } catch (const rt::Error& e) {
        std::fprintf(stderr, "slidefuse: error: %s\n", e.message().c_str());
        return false;
    }
    if (!rt::distributed()) return true;
    rt::set_log_prefix(rt::rank_prefix());
    if (!rt::is_rank0()) {
        rt::set_console_enabled(false);
        if (!std::getenv("SF_LOG_LEVEL")) rt::set_log_level(rt::LogLevel::Warn);
    }
    // The ranks of a node share its cores: without OMP_NUM_THREADS, each CPU-side OpenMP region (the
    // CPU reference backend's kernels) gets its share rather than every core.
    if (!std::getenv("OMP_NUM_THREADS"))
        omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, rt::comm().local_world())));
    SF_LOG_INFO("data-parallel job: %s; %d OpenMP threads per rank", rt::comm().describe().c_str(),
                omp_get_max_threads());
    return true;
}

int run_command(std::vector<std::string> args);

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    // SF_LOG_LEVEL=debug|info|warn|error (default info); debug adds where an error was raised.
    if (const char* l = std::getenv("SF_LOG_LEVEL")) {
        const std::string level = l;
        for (rt::LogLevel v : {rt::LogLevel::Debug, rt::LogLevel::Info, rt::LogLevel::Warn, rt::LogLevel::Error})
            if (level == rt::log_level_name(v)) rt::set_log_level(v);
    }
    if (!start_distributed()) return 1;
    const int rc = run_command(std::move(args));
    // One rank failing ends the job: the others may wait in a collective for it (MPI_Abort, exit rc).
    if (rc != 0 && rt::distributed()) rt::comm().abort(rc);
    rt::finalize_distributed();
    return rc;
}

namespace {

int run_command(std::vector<std::string> args) {
    try {
        if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
            std::fputs(kUsage, stdout);
            return args.empty() ? 1 : 0;
        }
        const std::string cmd = args[0];
        args.erase(args.begin());
        if (cmd == "version" || cmd == "--version") {
            std::printf("slidefuse 0.1.0\n");
            return 0;
        }
        if (cmd == "train") {
            if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
                std::printf("%s\n", tools::train_usage().c_str());
                return 0;
            }
            return tools::cmd_train(args);
        }
        // Data parallel covers train and bench step; every other command would run once per rank,
        // each writing the same outputs.
        const bool multi_rank = cmd == "train" || (cmd == "bench" && !args.empty() && args[0] == "step");
        SF_CHECK(multi_rank || !rt::distributed(),
                 "'slidefuse %s' runs as one process; of the commands, only train and bench step run as the %d ranks "
                 "of an MPI launch (docs/DISTRIBUTED.md): start it without mpirun/srun",
                 cmd.c_str(), rt::comm().world());
        if (cmd == "generate") return tools::cmd_generate(args);
        if (cmd == "convert") return tools::cmd_convert(args);
        if (cmd == "bench") return tools::cmd_bench(args);
        if (cmd == "plan") return tools::cmd_plan(args);
        if (cmd == "export") return tools::cmd_export(args);
        if (cmd == "eval") return tools::cmd_eval(args);
        if (cmd == "predict") return tools::cmd_predict(args);
        if (cmd == "devices") return tools::cmd_devices(args);
        if (cmd == "check") return tools::cmd_check(args);
        std::fprintf(stderr, "slidefuse: unknown command '%s'\n%s", cmd.c_str(), kUsage);
        return 1;
    } catch (const rt::Error& e) {
        // What went wrong first (the message names the file or key); where in the source: debug log.
        if (!e.location().empty()) SF_LOG_DEBUG("error raised at %s", e.location().c_str());
        std::fprintf(stderr, "slidefuse: error: %s%s\n", rt::rank_prefix().c_str(), e.message().c_str());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "slidefuse: error: %s%s\n", rt::rank_prefix().c_str(), e.what());
        return 1;
    }
}

}  // namespace
