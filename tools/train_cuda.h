// Data-parallel choices of the CUDA TrainBackend (tools/train_cuda.cpp), apart so the CPU tests
// reach them: which GPU a rank takes and whether the step allreduces its gradients through NCCL.
#pragma once

namespace tools {

// The NCCL world of the CUDA step: the job's world when it has more than one rank; 1 when
// SF_NCCL_WORLD1 is "1" in a world of 1 (a single GPU runs the NCCL path, allreduce inside the
// captured step, for testing); 0 otherwise (no NCCL: not even loaded). `env`: the variable's value
// (null when unset); any value but "", "0" or "1" throws, naming the variable.
int cuda_nccl_world(int comm_world, const char* env);

// The GPU of a rank: its node-local rank in a job of several ranks, else 0; the only visible GPU
// when the launcher confined the rank to one (srun --gpus-per-task=1). Throws naming the rank, the
// GPU and the GPUs this process sees when it sees several, but fewer than its node-local rank needs.
int cuda_rank_device(int comm_world, int rank, int local_rank, int visible_gpus);
// cuda_rank_device of this process (rt::comm()): the GPU every CUDA call of a training rank uses.
int cuda_train_device();

}  // namespace tools
