// The CUDA half of `slidefuse check`: one eager micro-step of CudaTrainStep on a SiderNetCuda
// with the reference's initial weights and batch, every layer captured (tools/layer_capture.h).
#include <cuda_runtime.h>

#include "kernels/conv_cudnn.h"
#include "model/train_step_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "tools/check.h"
#include "tools/layer_capture.h"

namespace tools {

namespace {

// A constant learning rate: the micro-step reads no schedule value, the step needs one.
model::LrSchedule constant_schedule(double lr) {
    model::LrSchedule s;
    s.sgdr = false;
    s.base_lr = s.eta_min = lr;
    s.total_steps = 1;
    return s;
}

}  // namespace

StepCapture cuda_step(const CheckSetup& s, const model::ParamTable& table, const NetState& init) {
    rt::CudaContext ctx(0);
    model::SiderNetCuda net(s.shape, ctx.exec(), kern::run_conv_policy(s.deterministic));
    SF_CHECK(net.table().flat_size == table.flat_size && net.table().params.size() == table.params.size(),
             "check: the CUDA network's parameter table differs from the reference's");
    CaptureObserver<kern::bf16> obs(net);
    rt::Exec ex = ctx.exec();
    ex.observer = &obs;  // the step's calls open the layer scopes on this Exec
    model::CudaTrainStep step(net, ex, s.loss, s.optim, constant_schedule(s.optim.adamw.lr), 1);

    // The batch in one device slot, copied on the compute stream (ordered before the step).
    rt::Arena slot("check batch", rt::MemKind::Device);
    const size_t po = slot.reserve(s.pixels.size(), 256, "check pixels");
    const size_t lo = slot.reserve(s.labels.size() * sizeof(data::Label), 256, "check labels");
    slot.allocate();
    slot.seal();
    uint8_t* pixels = slot.ptr<uint8_t>(po);
    data::Label* labels = slot.ptr<data::Label>(lo);
    SF_CUDA_CHECK(cudaMemcpyAsync(pixels, s.pixels.data(), s.pixels.size(), cudaMemcpyHostToDevice, ex.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(labels, s.labels.data(), s.labels.size() * sizeof(data::Label),
                                  cudaMemcpyHostToDevice, ex.stream));
    ctx.synchronize();  // the host vectors are pageable: the copies must land before they can go
    for (int k = 0; k < model::CudaTrainStep::kSlots; ++k) step.bind_slot(k, pixels, labels);

    // upload() takes mutable views; the initial state is copied so `init` stays the caller's.
    NetState st = init;
    step.upload({&net.table(), st.master.data(), nullptr, nullptr, st.buffers.data(), st.counters.data()});
    step.set_use_graphs(false);  // the observer sees every layer's scopes in eager mode only
    step.micro_step(0);
    ctx.synchronize();
    const model::CudaStepStats stats = step.read_stats();
    return obs.finish(ex, stats.loss);
}

}  // namespace tools
