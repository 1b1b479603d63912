// `slidefuse bench step`: whole-step training throughput of the CUDA backend (docs/BENCH.md).
// For every (batch size, input size): the network and step are planned and built, a synthetic
// batch (the generator's samples) is placed in a device slot, `warmup` steps run untimed, then
// each of `steps` steps is bracketed by CUDA events (graph replay by default, --eager for the
// uncaptured calls); NVML samples power, utilisation and clocks over the timed window. A batch
// whose dry-run plan cannot fit in free device memory is recorded as "oom" without being built.
// --search finds the largest batch within a memory budget (and the fastest among those probed);
// --layers adds the per-layer table of an eager run (forward/backward ms per layer, bytes, FLOPs,
// roofline share). JSON: tools/bench_report.h (schema "slidefuse.bench/1").
// --world N: every step ends with the NCCL gradient allreduce inside the captured optimizer step
// (N = the job's world; 1: a communicator of one rank, no MPI), and each run adds the allreduce alone
// (tools/bench_allreduce.h) under "extra". Only rank 0 prints and writes.
#include "tools/bench_step.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/generator.h"
#include "kernels/conv_cudnn.h"
#include "model/gpu_ops.h"
#include "model/init.h"
#include "model/train_step_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/device_info.h"
#include "runtime/device_report.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/log.h"
#include "runtime/nccl.h"
#include "runtime/nvml.h"
#include "runtime/profile.h"
#include "tools/batch_search.h"
#include "tools/bench_allreduce.h"
#include "tools/bench_configs.h"
#include "tools/bench_report.h"
#include "tools/bench_runs.h"
#include "tools/cuda_policy.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"
#include "tools/step_model.h"
#include "tools/train_cuda.h"

namespace tools {

namespace {

// A synthetic batch of the generator's samples in one device slot (both slots point at it).
class DeviceBatch {
public:
    DeviceBatch(int batch, int height, int width, int channels) {
        data::GenConfig g;
        g.seed = 2026;
        g.height = height;
        g.width = width;
        g.channels = channels - 1;  // pixel channels: the model input adds the valid mask
        std::vector<uint8_t> px;
        std::vector<data::Label> lb;
        for (int i = 0; i < batch; ++i) {
            const data::GenSample s = data::generate_sample(g, static_cast<uint64_t>(i));
            px.insert(px.end(), s.pixels.begin(), s.pixels.end());
            lb.push_back(s.label);
        }
        const size_t po = arena_.reserve(px.size(), 256, "bench pixels");
        const size_t lo = arena_.reserve(lb.size() * sizeof(data::Label), 256, "bench labels");
        arena_.allocate();
        arena_.seal();
        pixels_ = arena_.ptr<uint8_t>(po);
        labels_ = arena_.ptr<data::Label>(lo);
        SF_CUDA_CHECK(cudaMemcpy(pixels_, px.data(), px.size(), cudaMemcpyHostToDevice));
        SF_CUDA_CHECK(cudaMemcpy(labels_, lb.data(), lb.size() * sizeof(data::Label), cudaMemcpyHostToDevice));
        // cudaMemcpy from pageable memory runs on the legacy stream and may return before the DMA
        // lands; the step's (non-blocking) stream does not order against it.
        SF_CUDA_CHECK(cudaDeviceSynchronize());
    }
    void bind(model::CudaTrainStep& step) const {
        for (int s = 0; s < model::CudaTrainStep::kSlots; ++s) step.bind_slot(s, pixels_, labels_);
    }

private:
    rt::Arena arena_{"bench batch", rt::MemKind::Device};
    uint8_t* pixels_ = nullptr;
    data::Label* labels_ = nullptr;
};

// Records a pair of CUDA events around every scope of an eager step (per-layer timing).
class EventObserver : public rt::ScopeObserver {
public:
    ~EventObserver() override {
        for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    }
    // Off: scopes are ignored (the whole-step timing of the same rig, without per-scope events).
    void set_enabled(bool on) { enabled_ = on; }
    void begin(const rt::Exec& ex, const char* name) override {
        if (enabled_) open_.push_back({name, record(ex), nullptr});
    }
    void end(const rt::Exec& ex, const char* name) override {
        if (!enabled_) return;
        for (size_t i = open_.size(); i-- > 0;)
            if (open_[i].name == name && !open_[i].stop) {
                open_[i].stop = record(ex);
                return;
            }
        SF_FAIL("profiling scope '%s' ended without a begin", name);
    }
    // After the step completed: adds each scope's time to `ms[name]` and starts a new step.
    void collect(std::map<std::string, std::vector<double>>& ms) {
        std::map<std::string, double> step;
        for (const Mark& m : open_) {
            float t = 0;
            SF_CUDA_CHECK(cudaEventElapsedTime(&t, m.start, m.stop));
            step[m.name] += t;
        }
        for (const auto& kv : step) ms[kv.first].push_back(kv.second);
        open_.clear();
        used_ = 0;
    }

private:
    struct Mark {
        std::string name;
        cudaEvent_t start, stop;
    };
    cudaEvent_t record(const rt::Exec& ex) {
        if (used_ == pool_.size()) {
            cudaEvent_t e;
            SF_CUDA_CHECK(cudaEventCreate(&e));
            pool_.push_back(e);
        }
        cudaEvent_t e = pool_[used_++];
        SF_CUDA_CHECK(cudaEventRecord(e, ex.stream));
        return e;
    }
    std::vector<cudaEvent_t> pool_;
    size_t used_ = 0;
    bool enabled_ = true;
    std::vector<Mark> open_;
};

// CUDA events destroyed on every exit path (an error inside the timed loop must not leak them).
struct Events {
    std::vector<cudaEvent_t> ev;
    explicit Events(size_t n) {
        ev.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            cudaEvent_t e = nullptr;
            SF_CUDA_CHECK(cudaEventCreate(&e));
            ev.push_back(e);
        }
    }
    ~Events() {
        for (cudaEvent_t e : ev) cudaEventDestroy(e);
    }
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
    cudaEvent_t operator[](size_t i) const { return ev[i]; }
};

model::NetShape shape_of(int batch, const StepBenchOptions& o) {
    return {batch,        o.channels,    o.height,       o.width,     o.up_order, o.fuse_expand_dw,
            o.fuse_dw_pw, o.merge_heads, o.fuse_head_bn, o.fuse_up_bn};
}

model::LrSchedule bench_schedule() {
    model::LrSchedule s;
    s.sgdr = false;
    s.base_lr = s.eta_min = 3e-4;
    s.total_steps = 1 << 30;
    return s;
}

kern::ConvPolicy policy_of(const StepBenchOptions& o) {
    kern::ConvPolicy p = cuda_conv_policy(o.cuda, o.deterministic);
    p.max_candidates = o.conv_candidates;
    return p;
}

// The Exec the benchmarked network and step run on: the context's, with --pdl.
rt::Exec step_exec(const rt::CudaContext& ctx, const StepBenchOptions& o) { return cuda_exec(ctx, o.cuda); }

bool is_oom(const std::string& what) {
    // rt::Arena says "out of device memory", CUDA "out of memory" / cudaErrorMemoryAllocation.
    return what.find("out of memory") != std::string::npos || what.find("out of device memory") != std::string::npos ||
           what.find("cudaErrorMemoryAllocation") != std::string::npos;
}

// The network, step and batch for one configuration.
struct Rig {
    model::SiderNetCuda net;
    model::CudaTrainStep step;
    DeviceBatch batch;
    Rig(const rt::Exec& ex, int b, const StepBenchOptions& o, rt::NcclComm* nccl)
        : net(shape_of(b, o), ex, policy_of(o)),
          step(net, ex, model::LossConfig{}, model::OptimConfig{}, bench_schedule(), 1),
          batch(b, o.height, o.width, o.channels) {
        const model::ParamTable& t = net.table();
        std::vector<float> master(t.flat_size), buffers(t.buffer_floats);
        std::vector<int64_t> counters(t.counters);
        model::init_parameters(t, 42, master.data(), buffers.data(), counters.data());
        step.upload({&t, master.data(), nullptr, nullptr, buffers.data(), counters.data()});
        batch.bind(step);
        if (nccl) step.set_allreduce(nccl, nccl->world());
    }
    void run_step() {
        step.micro_step(0);
        step.optimizer_step();
    }
};

size_t device_used_bytes() {
    size_t free_b = 0, total_b = 0;
    std::string why;
    return rt::query_device_memory(&free_b, &total_b, &why) ? total_b - free_b : 0;
}

}  // namespace

// The memory plan of one batch without building it (no device work): the dry-run plan with the
// convolution workspace replaced by its upper bound (model::conv_workspace_bound), once per branch lane
// (each lane's region holds it), so a batch that cannot fit is refused before any cuDNN plan is built
// or timed for it.
model::MemoryPlan dry_run_memory(int b, const StepBenchOptions& o) {
    const kern::ConvPolicy policy = policy_of(o);
    const model::SiderNetCuda dry(shape_of(b, o), model::DryRun{&policy});
    model::MemoryPlan mp = dry.plan().memory();
    const size_t lanes = static_cast<size_t>(dry.plan().lanes());
    mp.workspace = std::max(mp.workspace, model::conv_workspace_bound(dry.plan().convs(), policy) * lanes);
    return mp;
}

BenchRun bench_one(rt::CudaContext& ctx, rt::Nvml& nvml, rt::NcclComm* nccl, int b, const StepBenchOptions& o) {
    BenchRun r;
    r.config = {b, o.height, o.width, o.channels, o.eager ? "eager" : "graph", o.warmup};
    // The plan first: a batch that cannot fit is refused before anything is allocated.
    const model::MemoryPlan mp = dry_run_memory(b, o);
    size_t free_b = 0, total_b = 0;
    std::string why;
    if (rt::query_device_memory(&free_b, &total_b, &why) && mp.total() > free_b) {
        r.status = "oom";
        r.error = rt::format("the plan needs %.2f GB, %.2f GB free", mp.total() / 1e9, free_b / 1e9);
        r.nvml = rt::NvmlSummary::unavailable("not timed");
        return r;
    }
    try {
        const auto t0 = std::chrono::steady_clock::now();
        Rig rig(step_exec(ctx, o), b, o, nccl);
        const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rig.step.set_use_graphs(!o.eager);
        for (int k = 0; k < o.warmup; ++k) rig.run_step();
        ctx.synchronize();
        const Events ev(static_cast<size_t>(o.steps) + 1);
        rt::NvmlSampler sampler(nvml.reader(), 50, nvml.reason());
        sampler.start();
        SF_CUDA_CHECK(cudaEventRecord(ev[0], ctx.exec().stream));
        for (int k = 0; k < o.steps; ++k) {
            rig.run_step();
            SF_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(k) + 1], ctx.exec().stream));
        }
        SF_CUDA_CHECK(cudaEventSynchronize(ev[static_cast<size_t>(o.steps)]));
        r.nvml = sampler.stop();
        for (int k = 0; k < o.steps; ++k) {
            float ms = 0;
            SF_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<size_t>(k)], ev[static_cast<size_t>(k) + 1]));
            r.timings_ms.push_back(ms);
        }
        r.peak_mem_bytes = device_used_bytes();
        r.extra = {{"plan_bytes", mp.total()},
                   {"activation_bytes", mp.activations + mp.activation_grads},
                   {"workspace_bytes", mp.workspace},
                   {"workspace_bytes_planned", rig.net.plan().memory().workspace},
                   {"plan_seconds", plan_s},
                   {"fusion_up_order", model::up_order_name(o.up_order)},
                   {"fuse_expand_dw", o.fuse_expand_dw},
                   {"fuse_dw_pw", o.fuse_dw_pw},
                   {"merge_heads", o.merge_heads},
                   {"fuse_head_bn", o.fuse_head_bn},
                   {"fuse_up_bn", o.fuse_up_bn}};
        r.extra.update(cuda_section_json(o.cuda));  // the kernels' switches under their config keys
        // What one replay launches: the kernel nodes are the step's kernel launches (docs/BENCH.md).
        if (rig.step.micro_graph_nodes().captured && rig.step.optimizer_graph_nodes().captured)
            r.extra["graph_nodes"] = graph_nodes_json(rig.step.micro_graph_nodes(), rig.step.optimizer_graph_nodes());
        // --dw-fused-bwd: the depthwise shapes that ran the fused backward, each with its variants line
        // (the separate passes' times and the fused kernel's, from the plan-time timing).
        if (o.cuda.dw_fused_bwd) r.extra["dw_fused"] = rig.net.gpu_ops()->describe_fused();
        if (nccl) {  // the allreduce alone, after the timed steps, on the step's stream
            const model::Planner& p = rig.net.plan();
            const AllreduceTiming a =
                time_allreduce(*nccl, p.grad(), p.table().flat_size, ctx.exec().stream, kAllreduceReps);
            r.extra["allreduce"] = allreduce_json(a);
        }
    } catch (const rt::Error& e) {
        r.status = is_oom(e.what()) ? "oom" : "error";
        r.error = e.what();
        r.timings_ms.clear();
        r.nvml = rt::NvmlSummary::unavailable("not timed");
        cudaGetLastError();  // clear a sticky allocation error before the next configuration
    }
    return r;
}

LayerReport bench_layers(rt::CudaContext& ctx, int b, const StepBenchOptions& o, const DevicePeaks& peaks) {
    EventObserver obs;
    rt::Exec ex = step_exec(ctx, o);
    ex.observer = &obs;
    Rig rig(ex, b, o, nullptr);      // one GPU's compute: no allreduce in the per-layer table
    rig.step.set_use_graphs(false);  // events around every layer: eager calls only
    for (int k = 0; k < o.warmup; ++k) {
        rig.run_step();
        ctx.synchronize();
        std::map<std::string, std::vector<double>> discard;
        obs.collect(discard);
    }
    std::map<std::string, std::vector<double>> ms;
    for (int k = 0; k < o.steps; ++k) {
        rig.run_step();
        ctx.synchronize();
        obs.collect(ms);
    }
    LayerReport rep;
    rep.config = {b, o.height, o.width, o.channels, "eager", o.warmup};
    rep.timed_steps = o.steps;
    rep.peaks = peaks;
    if (const model::GpuOps* ops = rig.net.gpu_ops()) rep.conv_plans = ops->describe();
    auto samples = [&](const std::string& name) {
        auto it = ms.find(name);
        return it == ms.end() ? std::vector<double>{} : it->second;
    };
    // Every layer and op of the step with its modelled work (tools/step_model.h), the times of its
    // scopes beside it.
    for (const StepModelRow& m : step_model(rig.net.plan(), rig.net.shape()))
        rep.rows.push_back(layer_row(m.name, m.fwd_scope.empty() ? std::vector<double>{} : samples(m.fwd_scope),
                                     m.bwd_scope.empty() ? std::vector<double>{} : samples(m.bwd_scope), m.fwd(),
                                     m.bwd()));
    // The whole eager step on its own, for the "outside any row" share: the same rig (same plans,
    // no second network in memory) with the per-scope events switched off.
    std::vector<double> whole;
    const Events az(2);
    const cudaStream_t stream = ctx.exec().stream;
    obs.set_enabled(false);
    for (int k = 0; k < o.warmup; ++k) rig.run_step();
    for (int k = 0; k < o.steps; ++k) {
        SF_CUDA_CHECK(cudaEventRecord(az[0], stream));
        rig.run_step();
        SF_CUDA_CHECK(cudaEventRecord(az[1], stream));
        SF_CUDA_CHECK(cudaEventSynchronize(az[1]));
        float t = 0;
        SF_CUDA_CHECK(cudaEventElapsedTime(&t, az[0], az[1]));
        whole.push_back(t);
    }
    rep.step_ms = median(whole);
    return rep;
}

namespace {

// --search: the largest batch within the budget and the fastest among those probed (shorter runs).
nlohmann::json run_search(rt::CudaContext& ctx, rt::Nvml& nvml, rt::NcclComm* nccl, const StepBenchOptions& o,
                          bool print) {
    std::string why;
    size_t free_b = 0, total_b = 0;
    SF_CHECK(rt::query_device_memory(&free_b, &total_b, &why), "device memory: %s", why.c_str());
    BatchSearchOptions so;
    so.budget_bytes = o.memory_budget_bytes > 0 ? o.memory_budget_bytes : free_b;
    const BatchSearchResult sr = search_batch_size(
        [&](int b) {
            BatchProbe p;
            p.bytes_needed = dry_run_memory(b, o).total();
            if (p.bytes_needed > so.budget_bytes) {
                p.fits = false;
                p.note = "plan exceeds the budget";
                return p;
            }
            StepBenchOptions quick = o;
            quick.steps = std::max(5, o.steps / 5);
            quick.warmup = std::max(2, o.warmup / 2);
            const BenchRun r = bench_one(ctx, nvml, nccl, b, quick);
            p.fits = r.status == "ok";
            p.note = r.error;
            if (p.fits) p.samples_per_s = b * 1000.0 / median(r.timings_ms);
            return p;
        },
        so);
    if (print)
        std::printf("batch search: largest %d within %.1f GB, fastest %d (%.1f samples/s)\n", sr.largest,
                    so.budget_bytes / 1e9, sr.fastest, sr.fastest_samples_per_s);
    return batch_search_json(sr);
}

}  // namespace

void print_run(int b, const BenchRun& r) {
    if (r.status != "ok") {
        std::printf("  batch %4d: %s: %s\n", b, r.status.c_str(), r.error.c_str());
        return;
    }
    const TimingStats t = timing_stats(r.timings_ms);
    std::printf("  batch %4d: %8.1f samples/s  %8.3f ms/step (p10 %.3f, p90 %.3f)  %.2f GB in use\n", b,
                b * 1000.0 / t.median, t.median, t.p10, t.p90, r.peak_mem_bytes / 1e9);
    const std::string graphs = graph_nodes_line(r.extra);
    if (!graphs.empty()) std::printf("              %s\n", graphs.c_str());
    if (r.extra.is_object() && r.extra.contains("dw_fused"))
        for (const auto& line : r.extra["dw_fused"]) std::printf("              %s\n", line.get<std::string>().c_str());
    if (r.extra.is_object() && r.extra.contains("allreduce")) {
        const AllreduceTiming at = allreduce_from_json(r.extra["allreduce"]);
        std::printf("              %s, %.1f%% of the step\n", allreduce_line(at).c_str(), 100.0 * at.ms / t.median);
    }
}

int bench_step(const StepBenchOptions& o, const std::string& command_line) {
    const rt::Comm& c = rt::comm();
    check_bench_world(o.world, c.world(), o.search);
    // --configs: the list read and checked before any device work.
    const std::vector<BenchConfig> configs = o.configs.empty()
                                                 ? std::vector<BenchConfig>{}
                                                 : select_bench_configs(read_bench_configs(o.configs, o.args), o.only);
    // A rank of a job takes the GPU of its node-local rank; a single process GPU 0.
    const int device = cuda_rank_device(c.world(), c.rank(), c.local_rank(), rt::visible_gpus());
    rt::check_cuda_device(device, "bench step");  // reports the GPU; refuses a missing or unsupported one
    rt::CudaContext ctx(device);
    std::unique_ptr<rt::NcclComm> nccl;
    if (o.world >= 1) nccl = std::make_unique<rt::NcclComm>(c.rank(), o.world, device);
    const rt::DeviceInfo dev = rt::query_device_info(device);
    (void)cuda_exec(ctx, o.cuda);  // --pdl on a GPU older than sm_90 refused before any run
    rt::Nvml nvml(dev.pci_bus_id, dev.ordinal);
    const bool print = rt::is_rank0();  // every rank runs the same steps (collectives); rank 0 reports
    BenchHeader h;
    h.command = command_line;
    h.commit = detect_git_commit();
    h.device = dev;
    h.driver = nvml.driver_version();
    if (print) {
        std::printf("bench step on %s (driver %s): input %dx%dx%d, %s, %d warm-up + %d timed steps\n", dev.name.c_str(),
                    h.driver.c_str(), o.channels, o.height, o.width, o.eager ? "eager" : "graph replay", o.warmup,
                    o.steps);
        if (!nvml.ok()) std::printf("NVML unavailable: %s\n", nvml.reason().c_str());
        if (nccl) std::printf("gradient allreduce in every step: %s\n", nccl->describe().c_str());
    }
    if (!o.configs.empty()) return bench_configs(ctx, nvml, h, o, configs);
    std::vector<nlohmann::json> runs;
    const rt::HeartbeatScope heartbeat;  // several ranks: one stuck for SF_DIST_TIMEOUT ends the job
    for (int b : o.batch_sizes) {
        rt::heartbeat();
        const BenchRun r = bench_one(ctx, nvml, nccl.get(), b, o);
        if (print) print_run(b, r);
        runs.push_back(run_json(r));
    }
    const nlohmann::json search_json = o.search ? run_search(ctx, nvml, nccl.get(), o, print) : nlohmann::json();
    nlohmann::json layers_json;
    if (o.layers) {
        const int b = o.layers_batch > 0 ? o.layers_batch : o.batch_sizes.front();
        const LayerReport rep = bench_layers(ctx, b, o, peaks_for_device(dev.name, o.peak_tflops, o.peak_gbps));
        if (print) {
            std::fputs(format_layer_table(rep).c_str(), stdout);
            std::printf("conv plans of the per-layer run (autotuned ms per call):\n");
            for (const std::string& line : rep.conv_plans) std::printf("  %s\n", line.c_str());
        }
        layers_json = layer_report_json(rep);
    }
    if (print && !o.json.empty()) {
        write_bench_json(o.json, bench_document(h, runs, search_json, layers_json));
        std::printf("wrote %s\n", o.json.c_str());
    }
    return 0;
}

}  // namespace tools
