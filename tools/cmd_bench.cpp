// `slidefuse bench <what>`: measurements with the warm-up excluded and an optional JSON record
// (docs/perf/). Today: `bench loader` — the data loader alone, reading existing shards (nothing is
// generated) into its (pinned when CUDA is usable) host ring as fast as the training thread can
// take batches, which releases them at once. Besides samples/s it times, on one thread over the
// first shard's bytes, what a sample read costs (CRC-32, memcpy, the full ShardReader::read), so
// the JSON says what bounds the figure.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "data/crc32.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/shard_io.h"
#include "kernels/bn_act_cuda.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tools/bench_report.h"
#include "tools/bench_step.h"
#include "tools/bench_ceilings.h"
#include "tools/cli_numbers.h"
#include "tools/commands.h"

namespace tools {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* kBenchUsage =
    "usage: slidefuse bench <what> [options]\n"
    "  step     whole training steps of the CUDA backend (docs/BENCH.md):\n"
    "           slidefuse bench step [--batch-sizes 64,128,256] [--size 256x512 | --height H --width W]\n"
    "                                [--channels 2]\n"
    "                                [--steps 50] [--warmup 10] [--eager] [--deterministic]\n"
    "                                [--conv-candidates 4]\n"
    "                                [--search] [--memory-budget-gb G] [--layers] [--layers-batch B]\n"
    "                                [--peak-tflops T] [--peak-gbps G] [--ceilings FILE] [--world N]\n"
    "                                [--up-order upsample_first|conv_first] [--fuse-expand-dw] [--fuse-dw-pw]\n"
    "                                [--merge-heads] [--fuse-head-bn] [--fuse-up-bn] [--no-dw-variants]\n"
    "                                [--bn-row-batch 1|4] [--bn-min-blocks 1|3] [--pdl] [--dw-fused-bwd]\n"
    "                                [--dw-fused-bwd-bn]\n"
    "                                [--dw-fused-bn-grad] [--upsample-row-loads] [--pw-custom] [--pw-stats]\n"
    "                                [--pw-bn-grad] [--dw-stats] [--pw-bn-bwd] [--pw-fused-bwd] [--head-bn-grad]\n"
    "                                [--head-bn-dx] [--branch-lanes]\n"
    "                                [--json OUT | --configs FILE --json-dir DIR [--only A,B] [--deadline-s S]]\n"
    "           --ceilings FILE: the roofline's peaks from `bench ceilings --json FILE` (measured GEMM\n"
    "           TFLOP/s and copy GB/s) instead of the datasheet\n"
    "           --world N: NCCL gradient allreduce in every step over the job's N ranks\n"
    "           (mpirun -np N slidefuse bench step --world N; 1: one rank, no MPI)\n"
    "           --up-order: the fusion up paths' order (model.fusion_up_order; default conv_first, what\n"
    "           training on CUDA runs with model.fusion_up_order: auto)\n"
    "           --fuse-expand-dw: the fused LiteBlock (model.fuse_expand_dw; docs/GPU_STEP.md)\n"
    "           --fuse-dw-pw: each depthwise ConvBN's BN + SiLU applied inside the following 1x1 conv's loads\n"
    "           (model.fuse_dw_pw; the depthwise activation never stored; docs/GPU_STEP.md)\n"
    "           --merge-heads: the four heads' conv1 (3x3 128 -> 64 each, all on Hf) as one 128 -> 256 ConvBN\n"
    "           (model.merge_heads; the same parameters; docs/GPU_STEP.md)\n"
    "           --fuse-head-bn: each head's conv1 BN + ReLU applied inside its conv2's loads, conv1's bias folded\n"
    "           into that BN (model.fuse_head_bn; the heads' activation and bias pass gone; docs/GPU_STEP.md)\n"
    "           --fuse-up-bn: each fusion up path's bilinear upsample (conv_first) formed inside its BN passes'\n"
    "           loads, the upsampled conv output never stored (model.fuse_up_bn; bitwise the same step)\n"
    "           --no-dw-variants: the custom depthwise kernels in variant 0 only, not the fastest of\n"
    "           their bitwise-equal variants (the step-level A/B of docs/KERNELS_DWCONV.md's variants)\n"
    "           --bn-row-batch N: rows per loop turn of the BatchNorm + activation kernels (1, the default,\n"
    "           or 4: four rows' loads issued together; bitwise-equal results; docs/KERNELS_BN_ACT.md)\n"
    "           --bn-min-blocks N: the BatchNorm backward's reduce and dx kernels compiled for N resident\n"
    "           blocks per SM (1, the default; 3: registers capped at 80; bitwise-equal results)\n"
    "           --pdl: the project's kernels launched with programmatic dependent launch (each scheduled\n"
    "           while its predecessor finishes; bitwise-equal results; docs/GPU_STEP.md)\n"
    "           --dw-fused-bwd: the stride-1 depthwise convolutions' dgrad and wgrad in one kernel (one pass\n"
    "           over dy and x; the same dx, dw summed in another order; docs/KERNELS_DWCONV.md)\n"
    "           --dw-fused-bwd-bn: --dw-fused-bwd with each depthwise ConvBN's BN backward dx formed inside\n"
    "           the fused kernel (no dx pass; bitwise equal to --dw-fused-bwd)\n"
    "           --dw-fused-bn-grad: --dw-fused-bwd and --fuse-expand-dw, with the expand BN's backward\n"
    "           reductions gathered in the depthwise kernel's epilogue (no reduce pass; summed in another order)\n"
    "           --upsample-row-loads: the bilinear upsampling backward issues each window row's loads\n"
    "           together (bitwise-equal results; docs/KERNELS_ELTWISE.md)\n"
    "           --pw-custom: the project's tensor-core 1x1 conv (forward, dgrad, wgrad) timed against cuDNN's\n"
    "           plans per 1x1 shape, the faster kept (another summation order: results change in the last\n"
    "           bits; docs/KERNELS_PWCONV.md)\n"
    "           --pw-stats: --pw-custom, and the 1x1 ConvBNs whose conv it runs take their BatchNorm statistics\n"
    "           from its epilogue (no statistics pass; the statistics summed in another order)\n"
    "           --pw-bn-grad: --pw-custom, and the 1x1 convs after a depthwise ConvBN whose dgrad it runs gather\n"
    "           that BN's backward reductions in the dgrad's epilogue (no reduce pass; summed in another order)\n"
    "           --dw-stats: the depthwise ConvBNs whose conv the custom kernels run take their BatchNorm\n"
    "           statistics from the staged depthwise forward's epilogue (no statistics pass; summed in another\n"
    "           order; docs/KERNELS_DWCONV.md)\n"
    "           --pw-bn-bwd: --pw-custom, and the 1x1 ConvBNs whose conv it runs form their BN's dx in its dgrad\n"
    "           and wgrad loads (no dx pass; bitwise the same step; docs/KERNELS_PWCONV.md)\n"
    "           --pw-fused-bwd: --pw-custom, and the 1x1 convs whose passes it runs take their dgrad and wgrad in\n"
    "           one kernel where the shape fits (cin, cout of 32-128, cin * cout <= 8192): one read of dy and x for\n"
    "           both (bitwise the same step, but for --pw-bn-grad's sums, which its epilogue then gathers in\n"
    "           another order; docs/KERNELS_PWCONV.md)\n"
    "           --head-bn-grad: --fuse-head-bn, and the heads' conv2 backward gathers the conv1 BN's backward\n"
    "           reductions from the dx it stores (no statistics pass; summed in another order;\n"
    "           docs/KERNELS_ELTWISE.md)\n"
    "           --head-bn-dx: --head-bn-grad, and the heads' conv2 backward stores no dx: the conv1 BN's dx pass\n"
    "           forms it from the logits' gradient and the conv2 weights (bitwise the same step;\n"
    "           docs/KERNELS_ELTWISE.md)\n"
    "           --branch-lanes: the HRNet stages' branches on side streams of their own, forked and joined per\n"
    "           stage (parallel paths of the step's graph; bitwise the same step; docs/GPU_STEP.md)\n"
    "           --configs FILE: the configurations FILE lists (one a line: NAME [SWITCH...], the first the\n"
    "           base; tools/bench_configs.h) timed one after another in this process, the same plans for the\n"
    "           same convolutions, each written to DIR/NAME.json; the base again at the end (NAME_again.json);\n"
    "           DIR/configs_summary.json lists them all. --only: the base and these; --deadline-s: no\n"
    "           configuration starts that would not end within S seconds of the start (the rest listed as skipped)\n"
    "  ceilings device-to-device copy GB/s and bf16 GEMM TFLOP/s measured on the GPU (the roofline's\n"
    "           measured ceilings): slidefuse bench ceilings [--copy-mib 1024] [--gemm-n 8192] [--json OUT]\n"
    "  loader   the data loader alone:\n"
    "           slidefuse bench loader --data DIR [--batch 128] [--workers 2] [--prefetch 4]\n"
    "                                  [--seconds 10] [--warmup 2] [--no-shuffle] [--json OUT]\n";

struct LoaderArgs {
    std::string data, json;
    int batch = 128, workers = 2, prefetch = 4;
    double seconds = 10, warmup = 2;
    bool shuffle = true;
};

LoaderArgs parse_loader_args(const std::vector<std::string>& args) {
    LoaderArgs a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--no-shuffle") {
            a.shuffle = false;
            continue;
        }
        SF_CHECK(s.rfind("--", 0) == 0, "bench loader: unexpected argument '%s'\n%s", s.c_str(), kBenchUsage);
        SF_CHECK(i + 1 < args.size(), "bench loader: %s needs a value", s.c_str());
        const std::string& v = args[++i];
        if (s == "--data")
            a.data = v;
        else if (s == "--json")
            a.json = v;
        else if (s == "--batch")
            a.batch = parse_int_at_least(s, v, 1);
        else if (s == "--workers")
            a.workers = parse_int_at_least(s, v, 1);
        else if (s == "--prefetch")
            a.prefetch = parse_int_at_least(s, v, 1);
        else if (s == "--seconds")
            a.seconds = parse_seconds(s, v);
        else if (s == "--warmup")
            a.warmup = parse_seconds(s, v);
        else
            SF_FAIL("bench loader: unknown option '%s'\n%s", s.c_str(), kBenchUsage);
    }
    SF_CHECK(!a.data.empty(), "bench loader: missing --data DIR (a folder of *.sfshard files)\n%s", kBenchUsage);
    SF_CHECK(a.seconds > 0, "bench loader: --seconds must be > 0");
    return a;
}

nlohmann::json machine_info() {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    std::string cpu;
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; cpu.empty() && std::getline(info, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
            cpu = line.substr(line.find(':') + 2);
    const double mem_gib =
        static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 30);
    nlohmann::json m = {{"hostname", host},
                        {"cpu", cpu},
                        {"logical_cpus", std::thread::hardware_concurrency()},
                        {"memory_gib", mem_gib}};
    std::string why;
    cudaDeviceProp prop{};
    if (rt::cuda_device_available(&why) && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        m["gpu"] = prop.name;
    else
        m["gpu"] = nullptr;
    return m;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// One thread, over up to 2048 samples spread across all shards (memory speed can differ from
// file to file): GB/s of CRC-32 and of memcpy over the mapped pixel bytes, and samples/s of
// ShardReader::read (CRC + label check + copy). Each mapping is touched once untimed first, so
// page faults (paid once per run by the loader) are not counted.
nlohmann::json single_thread_costs(const std::vector<std::string>& shards) {
    const size_t per_shard = std::max<size_t>(1, 2048 / shards.size());
    double t_crc = 0, t_copy = 0, t_read = 0, bytes = 0;
    size_t samples = 0;
    uint32_t crc = 0;
    for (const std::string& path : shards) {
        const data::ShardReader reader(path);
        const data::MappedFile file(path);
        const size_t n = std::min(per_shard, reader.count());
        const size_t stored = data::stored_pixel_bytes(reader.spec());
        if (n == 0) continue;
        const uint8_t* src = file.data() + data::kShardPixelsOffset;
        std::vector<uint8_t> dst(std::max(stored, reader.pixel_bytes()));
        for (size_t i = 0; i < n; ++i) std::copy(src + i * stored, src + (i + 1) * stored, dst.data());
        for (size_t i = 0; i < n; ++i) reader.read(i, dst.data());
        Clock::time_point t0 = Clock::now();
        for (size_t i = 0; i < n; ++i) crc ^= data::crc32(src + i * stored, stored);
        t_crc += since(t0);
        t0 = Clock::now();
        for (size_t i = 0; i < n; ++i) std::copy(src + i * stored, src + (i + 1) * stored, dst.data());
        t_copy += since(t0);
        t0 = Clock::now();
        for (size_t i = 0; i < n; ++i) reader.read(i, dst.data());
        t_read += since(t0);
        bytes += static_cast<double>(n * stored);
        samples += n;
    }
    nlohmann::json j = {{"samples", samples}};
    if (samples == 0) return j;
    j["crc32_gb_per_s"] = bytes / t_crc / 1e9;
    j["memcpy_gb_per_s"] = bytes / t_copy / 1e9;
    j["read_samples_per_s"] = samples / t_read;
    j["crc_checksum_xor"] = crc;  // keeps the CRC loop from being optimised away
    return j;
}

// Warm-up, then next()/release() as fast as possible for a.seconds; the loader's own counters say
// who waited on whom.
nlohmann::json time_loader(data::Loader& loader, const LoaderArgs& a, double sample_bytes) {
    const Clock::time_point w0 = Clock::now();
    do {
        loader.next();
        loader.release();
    } while (since(w0) < a.warmup);

    const data::LoaderStats s0 = loader.stats();
    uint64_t samples = 0, batches = 0;
    const Clock::time_point t0 = Clock::now();
    double elapsed = 0;
    do {
        samples += static_cast<uint64_t>(loader.next().n);
        loader.release();
        ++batches;
        elapsed = since(t0);
    } while (elapsed < a.seconds);
    const data::LoaderStats s1 = loader.stats();
    const data::Cursor end = loader.cursor();

    const double sps = samples / elapsed;
    return {
        {"samples_per_s", sps},
        {"batches_per_s", batches / elapsed},
        {"mb_per_s", sps * sample_bytes / 1e6},
        {"samples", samples},
        {"batches", batches},
        {"seconds", elapsed},
        {"memory", s1.pinned ? "pinned" : "host"},
        {"consumer_wait_fraction", (s1.consumer_wait_s - s0.consumer_wait_s) / elapsed},
        {"worker_wait_fraction", (s1.worker_wait_s - s0.worker_wait_s) / (elapsed * a.workers)},
        {"epochs_read", static_cast<double>(end.epoch) + static_cast<double>(end.batch) / loader.batches_per_epoch()},
        {"crc_checked", true}};
}

void write_json(const std::string& path, const nlohmann::json& j) {
    std::ofstream out(path);
    SF_CHECK(out.good(), "bench: cannot write %s", path.c_str());
    out << j.dump(2) << "\n";
    SF_CHECK(out.good(), "bench: writing %s failed", path.c_str());
}

int bench_loader(const std::vector<std::string>& args) {
    const LoaderArgs a = parse_loader_args(args);
    data::LoaderConfig cfg;
    cfg.shards = data::list_shards(a.data);
    cfg.batch_size = a.batch;
    cfg.workers = a.workers;
    cfg.prefetch = a.prefetch;
    cfg.shuffle = a.shuffle;
    cfg.drop_last = true;
    cfg.pinned = true;
    data::Loader loader(cfg);
    const data::ShardSpec spec = loader.spec();
    const double sample_bytes = static_cast<double>(spec.height) * spec.width * spec.channels;

    const nlohmann::json result = time_loader(loader, a, sample_bytes);
    std::printf(
        "bench loader: %.0f samples/s (%.1f batches/s, %.0f MB/s) into %s host memory; %d workers, batch %d, "
        "prefetch %d, %s; training thread waited %.0f%% of the time, workers %.0f%%\n",
        result["samples_per_s"].get<double>(), result["batches_per_s"].get<double>(), result["mb_per_s"].get<double>(),
        result["memory"] == "pinned" ? "pinned" : "pageable", a.workers, a.batch, a.prefetch,
        a.shuffle ? "shuffled" : "in file order", 100 * result["consumer_wait_fraction"].get<double>(),
        100 * result["worker_wait_fraction"].get<double>());

    const nlohmann::json costs = single_thread_costs(cfg.shards);
    if (costs.contains("crc32_gb_per_s"))
        std::printf(
            "one thread: CRC-32 %.2f GB/s, memcpy %.2f GB/s, ShardReader::read %.0f samples/s (%.0f bytes each)\n",
            costs["crc32_gb_per_s"].get<double>(), costs["memcpy_gb_per_s"].get<double>(),
            costs["read_samples_per_s"].get<double>(), sample_bytes);

    if (!a.json.empty()) {
        std::string command = "slidefuse bench loader";
        for (const std::string& s : args) command += " " + s;
        const nlohmann::json sample = {{"height", spec.height},
                                       {"width", spec.width},
                                       {"channels", spec.channels},
                                       {"quant4", spec.quant4},
                                       {"bytes", sample_bytes}};
        const nlohmann::json config = {{"prefetch", a.prefetch},
                                       {"shuffle", a.shuffle},
                                       {"warmup_s", a.warmup},
                                       {"shards", cfg.shards.size()},
                                       {"dataset_samples", loader.dataset_size()},
                                       {"sample", sample}};
        write_json(a.json, {{"bench", "loader"},
                            {"date", utc_now()},
                            {"command", command},
                            {"machine", machine_info()},
                            {"threads", a.workers},
                            {"batch", a.batch},
                            {"config", config},
                            {"result", result},
                            {"single_thread", costs}});
    }
    return 0;
}

}  // namespace

const char* bench_usage() { return kBenchUsage; }

int cmd_bench(const std::vector<std::string>& args) {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
        std::fputs(kBenchUsage, args.empty() ? stderr : stdout);
        return args.empty() ? 1 : 0;
    }
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "loader") {
        if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
            std::fputs(kBenchUsage, stdout);
            return 0;
        }
        return bench_loader(rest);
    }
    if (args[0] == "step") {
        if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
            std::fputs(kBenchUsage, stdout);
            return 0;
        }
        std::string line = "slidefuse bench step";
        for (const std::string& a : rest) line += " " + a;
        return bench_step(parse_step_bench_args(rest), line);
    }
    if (args[0] == "ceilings") return bench_ceilings_command(rest);
    SF_FAIL("bench: unknown benchmark '%s'\n%s", args[0].c_str(), kBenchUsage);
}

}  // namespace tools
