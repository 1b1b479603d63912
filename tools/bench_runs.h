// The single runs `slidefuse bench step` is made of (tools/bench_step.cpp), shared with the
// configuration lists of tools/bench_configs.cpp: one configuration's timed step, its per-layer
// table, and the printed line of a run.
#pragma once
#include "tools/bench_report.h"
#include "tools/bench_step.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"

namespace rt {
class CudaContext;
class Nvml;
class NcclComm;
}  // namespace rt

namespace tools {

// Batch b of configuration o timed as `bench step` times it: refused as "oom" when its dry-run plan
// cannot fit in free device memory; an rt::Error while building or running it becomes status "error"
// (or "oom"), never a throw. nccl: the allreduce in every step (nullptr: none).
BenchRun bench_one(rt::CudaContext& ctx, rt::Nvml& nvml, rt::NcclComm* nccl, int b, const StepBenchOptions& o);
// The per-layer table of an eager run of batch b (throws rt::Error).
LayerReport bench_layers(rt::CudaContext& ctx, int b, const StepBenchOptions& o, const DevicePeaks& peaks);
// "  batch  128:  2129.7 samples/s ..." and its graph-node, fused-backward and allreduce lines.
void print_run(int b, const BenchRun& r);

}  // namespace tools
