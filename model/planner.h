// Planner: the model's memory plan (DESIGN §3), declared by the layers themselves.
// The network calls every layer's declare() twice with the same Planner:
//   1. sizing pass: each call reserves space and records names/shapes, the convolutions the step
//      will run and the scratch each op needs; nothing is allocated;
//   2. finish_sizing() makes one allocation per region (params, buffers, activations, activation
//      grads, workspace) and switches to the binding pass, in which the same calls, in the same
//      order, hand out the final pointers; finish_binding() checks both passes agreed and seals.
// After that no pointer changes and nothing allocates.
// Activation gradients: between the two passes the network traces its backward (model/grad_tape.h)
// and plan_grads() turns the trace into lifetimes (first write .. last read) and offsets: gradients
// that never live at the same time share bytes; the first contribution to each overwrites, so
// nothing is zeroed (GradLayout::Shared). GradLayout::Separate keeps the reference layout (every
// gradient its own region, all accumulated into a region zeroed before each micro-step).
// A dry-run planner stops after the sizing pass: it reports the plan (bytes per region, conv
// shapes) without allocating anything, on any machine (batch-size search, CPU tests).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/tensor.h"
#include "model/grad_tape.h"
#include "model/params.h"
#include "runtime/arena.h"
#include "runtime/lanes.h"

namespace model {

class GpuOps;  // model/gpu_ops.h: convolution dispatch of the CUDA backend

// Sizing-pass gradient placeholders: the gradient of the i-th act() is named by
// kGradPlaceholderBase + i * 256, a low address range nothing is mapped at; only the backward trace
// sees them (they are never dereferenced).
constexpr uintptr_t kGradPlaceholderBase = 0x10000;

// An activation tensor and its gradient (NHWC), element type T: float on the CPU reference
// backend, bf16 on CUDA (the heads' logits are float on both). g is valid only during its lifetime
// in the backward (the planner shares its bytes with gradients that live at other times); null when
// the backward never touches it.
template <class T>
struct ActT {
    T* v = nullptr;
    T* g = nullptr;
    kern::Shape4 shape;
    size_t numel() const { return shape.numel(); }
};
using Act = ActT<float>;

// A trainable parameter: master weights and gradient (same offsets in the flat ranges) and the
// bf16 working copy the CUDA forward reads.
struct Param {
    float* w = nullptr;
    float* g = nullptr;
    kern::bf16* h = nullptr;
    size_t numel = 0;
};

// A convolution the step runs, recorded by the sizing pass (the CUDA backend builds its plans from
// this list before the arena is sealed). One entry per distinct shape. The dgrad modes come from
// the traced backward (Planner::plan_grads): a backward-data that is the first contribution to its
// dx overwrites it (a beta = 0 plan), a later one accumulates (beta = 1 or scratch + add); a shape
// used by several layers may need both. With dgrad set and neither mode recorded (a list built by
// hand, or before plan_grads), the accumulate mode is assumed.
struct ConvUse {
    kern::ConvShape shape;
    bool dgrad = false;             // the input needs a gradient (false for the first conv)
    bool dgrad_overwrite = false;   // some backward-data of this shape overwrites dx
    bool dgrad_accumulate = false;  // some backward-data of this shape accumulates into dx
    // Some forward of this shape applies its input's BatchNorm + activation on load (kern::DwPrologue:
    // the fused LiteBlock's depthwise conv, whose forward variants that can (kern::dw_variant_prologue)
    // the network times with this activation; or, NetShape::fuse_dw_pw, a 1x1 conv after a depthwise
    // one, whose prologue forward and wgrad are the project's kernels).
    bool bn_prologue = false;
    kern::Act prologue_act = kern::Act::None;
    // The epilogues some layer of this shape may run (Planner::conv_epilogues): the following BN's
    // statistics in the forward (a 1x1 conv: ConvBN::pw_stats, GpuOps::pw_stats; a depthwise conv:
    // ConvBN::dw_stats, GpuOps::dw_stats), the preceding BN's backward
    // reductions in the dgrad (ConvBN::grad_sums_of, GpuOps::pw_bn_grad; that BN's activation
    // bn_grad_act). GpuOps times the project's kernel with them and credits cuDNN's time with the passes
    // they remove, so that the choice compares what the step would run.
    bool stats_epilogue = false;
    bool bn_grad_epilogue = false;
    kern::Act bn_grad_act = kern::Act::None;
    // Some 1x1 layer of this shape forms its BN's dx in the dgrad's and wgrad's loads (ConvBN::pw_fused_bn,
    // GpuOps::pw_bn_bwd; that BN's activation bn_bwd_act): GpuOps times the project's dgrad and wgrad so and
    // credits cuDNN with the dx pass.
    bool bn_bwd_prologue = false;
    kern::Act bn_bwd_act = kern::Act::None;
    // Some 1x1 layer of this shape takes its dgrad and wgrad in one kernel (ConvBN::pw_fused_bwd,
    // GpuOps::pw_fused_bwd): GpuOps times the project's backward so (with the BN-backward epilogue where
    // bn_grad_epilogue), the choice then comparing what the step would run.
    bool pw_fused_bwd = false;
    bool needs_overwrite() const { return dgrad && dgrad_overwrite; }
    bool needs_accumulate() const { return dgrad && (dgrad_accumulate || !dgrad_overwrite); }
};

// Same geometry and bias (what makes two convolutions one ConvUse).
bool same_conv_shape(const kern::ConvShape& a, const kern::ConvShape& b);

// Step-time check of a backward-data's mode against the modes planned for its conv: throws, naming
// the shape and the modes prepared, when `accumulate` asks for one that was not prepared.
void check_dgrad_mode(const ConvUse& u, bool accumulate);

// A layer with a convolution, in execution order (sizing pass), for per-layer reports: its
// profiling scope names are "<name> fwd" and "<name> bwd".
struct LayerKernels {
    // The kernel fusions a layer takes under the policy the network is planned for (kern::ConvPolicy's switches,
    // where the layer qualifies; set by ConvBN where it decides them, Planner::layer_kernels), for the step's cost
    // model (tools/step_model.h). A 1x1 conv's need the project's kernel, which autotuning may pass over for cuDNN's:
    // the model assumes it runs.
    //   stats_in_conv   the BN's batch statistics from the conv forward's epilogue (pw_stats, dw_stats): no
    //                   statistics pass
    //   bn_dx_in_conv   the BN's dx formed in the conv backward's loads (pw_bn_bwd: the 1x1 dgrad and wgrad;
    //                   dw_fused_bn_bwd: the fused depthwise backward): no dx pass, those kernels read the BN's
    //                   dy and input instead of the conv output's gradient
    //   dw_fused_bwd    the depthwise dgrad and wgrad in one kernel: one pass over the output's gradient
    //   pw_fused_bwd    the 1x1 dgrad and wgrad in one kernel (kern::pwconv_backward_fused_cuda): one read of the
    //                   output's gradient (with bn_dx_in_conv: of the BN's dy and input) for both
    //   gathers_input_bn_sums  the conv's backward-data gathers its producer's (the layer before it, whose output
    //                   it reads) BN backward reductions in its epilogue (pw_bn_grad: a 1x1 dgrad, which then
    //                   reads that BN's input; dw_fused_bn_grad: the fused depthwise backward, which reads it
    //                   anyway): the producer's reduction pass is gone
    //   input_grad_recomputed  the conv's input gradient is not stored: its producer's BN dx pass forms it where it
    //                   reads it (head_bn_dx: a head's conv2, from its logits' gradient and weights)
    bool stats_in_conv = false;
    bool bn_dx_in_conv = false;
    bool dw_fused_bwd = false;
    bool pw_fused_bwd = false;
    bool gathers_input_bn_sums = false;
    bool input_grad_recomputed = false;
};

struct LayerUse {
    std::string name;
    kern::ConvShape shape;
    bool batchnorm = true;  // conv -> BN (+ activation); false for the heads' last 1x1
    kern::Act act = kern::Act::None;
    bool input_grad = true;  // the backward computes the input's gradient
    int upsample = 1;        // > 1: bilinear xupsample between the conv and the BN (UpOrder::ConvFirst)
    bool residual = false;   // the output is added to a residual in the same pass (ConvBN::sum_into)
    // From the traced backward (Planner::plan_grads; true until then): whether the input gradient's
    // write (the conv's backward-data, the layer's last gradient write) adds into what an earlier op
    // wrote (false: the first contribution overwrites it).
    bool input_grad_accumulates = true;
    // ConvBN::apply_in_consumer / prologue (NetShape::fuse_expand_dw, fuse_dw_pw): the BN + activation is
    // applied by the consumer on load (the output is never stored), or this conv (a depthwise conv after
    // an expand, a 1x1 conv after a depthwise conv) applies its producer's.
    bool bn_applied_by_consumer = false;
    bool input_bn_prologue = false;
    // ConvBN::up_in_bn (NetShape::fuse_up_bn, upsample > 1): the BN passes form the upsampled tensor on load.
    bool up_in_bn = false;
    // The kernel fusions of the policy the network is planned for (LayerKernels above; Planner::layer_kernels).
    LayerKernels kernels = {};
};

// An op of the step outside the convolution layers, in execution order (sizing pass), for the
// step's cost model (tools/step_model.h). Its profiling scopes are "<name> fwd" (none for GradSum)
// and "<name> bwd".
//   Upsample      bilinear x`factor` of `in` (the fusion up paths in UpOrder::UpsampleFirst, LiteFPN's
//                 top-down path); backward: the input's gradient from the output's.
//   WeightedFuse  LiteFPN's w_a*a + w_b*b of two `in`-shaped tensors; backward: both operands'
//                 gradients and the two weights'.
//   GradSum       backward only: an `in`-shaped gradient added into an operand's gradient (a LiteBlock's
//                 residual, a fusion sum's own branch): x.g (+)= sum.g.
struct OpUse {
    enum class Kind { Upsample, WeightedFuse, GradSum };
    std::string name;
    Kind kind = Kind::Upsample;
    kern::Shape4 in;
    int factor = 1;  // Upsample
    // From the traced backward (plan_grads): the activation-gradient writes made in "<name> bwd" and
    // how many of them add into an earlier op's contribution (the others are first writes).
    int grad_writes = 0, grad_accumulates = 0;
};

// Bytes per region of a plan. activation_grads is the region after sharing; the grad_* fields
// describe it (valid once the gradients are planned).
struct MemoryPlan {
    size_t params = 0, buffers = 0, activations = 0, activation_grads = 0, workspace = 0;
    size_t grad_tensors = 0;      // activation gradients the backward touches
    size_t grad_unshared = 0;     // their bytes with a region each (256-byte aligned)
    size_t grad_zeroed = 0;       // bytes zero_activation_grads clears per micro-step
    size_t grad_dgrad_first = 0;  // bytes first written by a conv backward-data (see GPU_STEP.md)
    size_t grad_copies = 0;       // backward ops whose write is a plain copy of another gradient
    size_t grad_copied = 0;       // their bytes (each read once and written once per micro-step)
    size_t total() const { return params + buffers + activations + activation_grads + workspace; }
};

// How activation gradients are laid out (see the header comment).
enum class GradLayout { Shared, Separate };

// One activation gradient of the plan: bytes, lifetime in backward ops ([first, last], first = -1
// for a gradient the backward reads before writing: the logits' gradients, written by the loss)
// and offset in the region.
struct GradSlot {
    std::string what;
    size_t bytes = 0;
    int first = 0, last = -1;  // last < first: never touched
    size_t offset = 0;
    bool used() const { return last >= first; }
};

class Planner {
public:
    explicit Planner(rt::MemKind kind, bool dry_run = false, GradLayout layout = GradLayout::Shared);

    bool binding() const { return binding_; }
    bool dry_run() const { return dry_run_; }
    rt::MemKind kind() const { return kind_; }

    // An activation and its gradient. Sizing pass: g is a placeholder naming the gradient for the
    // backward trace (never dereferenced); binding pass: its planned place (null when unused).
    // local_grad is accepted for compatibility: the liveness plan finds every lifetime itself.
    template <class T>
    ActT<T> act(const kern::Shape4& s, const char* what, bool local_grad = false);
    // An activation whose values are never stored (v stays null: its consumer recomputes them on
    // load, the fused LiteBlock's expand output) but whose gradient is planned like act()'s.
    template <class T>
    ActT<T> grad_only(const kern::Shape4& s, const char* what);
    float* scratch(size_t numel, const char* what);  // fp32 values only (saved statistics, ...)
    template <class T>
    T* scratch_as(size_t numel, const char* what);  // values of type T (the network input, ...)
    Param param(const std::string& name, std::vector<int64_t> torch_shape, bool conv_weight);
    float* buffer(const std::string& name, std::vector<int64_t> torch_shape);
    int64_t* counter(const std::string& name);

    // Sizing pass: records a convolution (deduplicated by shape; dgrad ORed).
    // bn_prologue: this forward applies its input's BN + activation prologue_act on load (ConvUse).
    void conv(const kern::ConvShape& s, bool dgrad, bool bn_prologue = false, kern::Act prologue_act = kern::Act::None);
    // Marks the epilogues a layer of shape s (already declared by conv()) may run (ConvUse).
    void conv_epilogues(const kern::ConvShape& s, bool stats, bool bn_grad, kern::Act bn_grad_act);
    // Marks a shape (already declared) whose dgrad and wgrad some layer runs with its BN's dx formed on load.
    void conv_bn_backward(const kern::ConvShape& s, kern::Act act);
    const std::vector<ConvUse>& convs() const { return convs_; }
    void layer(const LayerUse& l);
    // The kernel fusions of the layer recorded last, which must be `name` (nothing in the binding pass).
    void layer_kernels(const std::string& name, const LayerKernels& k);
    const std::vector<LayerUse>& layers() const { return layers_; }
    void op_use(const OpUse& o);
    const std::vector<OpUse>& op_uses() const { return op_uses_; }
    // Shared fp32 scratch for reductions (one op at a time on one stream): the region is the max
    // over every request and over extra_workspace_bytes(). Binding pass: returns the region of the
    // lane being declared (set_lane): with branch lanes, one such region per lane, so that ops running
    // at once on different lanes never share scratch.
    float* workspace(size_t floats);
    size_t workspace_floats() const { return workspace_floats_; }
    // Branch lanes (runtime/lanes.h, GpuOps::branch_lanes): before the sizing pass, how many lanes the
    // network's parallel sections use (1: none, every op on one stream). During both passes the network
    // names the lane whose layers it declares (0 outside a branch); their workspace() is that lane's.
    void set_lanes(int n);
    int lanes() const { return lanes_; }
    void set_lane(int k);
    int lane() const { return lane_; }
    // Binding pass: lane k's workspace region (workspace_lane_bytes() each; lane 0 = workspace_base()).
    float* workspace_base(int k) const;
    size_t workspace_lane_bytes() const { return workspace_floats_ * sizeof(float); }
    void set_extra_workspace_bytes(size_t bytes);  // before finish_sizing (convolution plans)
    // The CUDA backend's conv dispatch, handed to the layers at declare time (null on the CPU).
    void set_gpu_ops(GpuOps* ops) { ops_ = ops; }
    GpuOps* gpu_ops() const { return ops_; }
    // GpuOps::dw_fused_bn of the policy the network is planned for (before the sizing pass): which
    // depthwise ConvBNs declare the fused BN backward, whose trace keeps dy alive while dx is written
    // and whose layer workspace is larger. Set from GpuOps on a CUDA network and from DryRun::policy on
    // a dry run, so that the dry run plans the same memory as the network it stands for.
    void set_dw_fused_bn(bool on) { dw_fused_bn_ = on; }
    bool dw_fused_bn() const { return dw_fused_bn_; }
    // GpuOps::pw_stats of that policy, set the same way: which 1x1 ConvBNs reserve the statistics
    // epilogue's workspace.
    void set_pw_stats(bool on) { pw_stats_ = on; }
    // GpuOps::dw_bn_grad of that policy: whether the fused LiteBlock's expand ConvBN keeps the coefficients
    // its consumer's epilogue writes (ConvBN::bn_coef) and its depthwise ConvBN reserves those partials.
    void set_dw_bn_grad(bool on) { dw_bn_grad_ = on; }
    bool dw_bn_grad() const { return dw_bn_grad_; }
    // GpuOps::pw_bn_grad of that policy: whether each depthwise ConvBN keeps the coefficients its 1x1
    // consumer's dgrad epilogue writes and that consumer reserves those partials.
    void set_pw_bn_grad(bool on) { pw_bn_grad_ = on; }
    // kern::ConvPolicy::dw_fused_bwd of that policy: which depthwise ConvBNs record their backward as one kernel
    // (LayerUse::dw_fused_bwd; GpuOps decides at run time, on the same rule).
    void set_dw_fused_bwd(bool on) { dw_fused_bwd_ = on; }
    bool dw_fused_bwd() const { return dw_fused_bwd_; }
    bool pw_bn_grad() const { return pw_bn_grad_; }
    bool pw_stats() const { return pw_stats_; }
    // GpuOps::dw_stats of that policy: which depthwise ConvBNs reserve the statistics epilogue's workspace.
    void set_dw_stats(bool on) { dw_stats_ = on; }
    bool dw_stats() const { return dw_stats_; }
    // GpuOps::pw_bn_bwd of that policy: which 1x1 ConvBNs declare the fused BN backward (ConvBN::pw_fused_bn),
    // whose trace keeps dy alive while dx is written and whose layer workspace holds the wgrad's partials.
    void set_pw_bn_bwd(bool on) { pw_bn_bwd_ = on; }
    bool pw_bn_bwd() const { return pw_bn_bwd_; }
    // GpuOps::pw_fused_bwd of that policy: which 1x1 ConvBNs may take the fused dgrad + wgrad (LayerKernels).
    void set_pw_fused_bwd(bool on) { pw_fused_bwd_ = on; }
    // kern::ConvPolicy::head_bn_grad: whether the heads' conv1 BN leaves its backward reductions to the conv2 that
    // applies it (NetShape::fuse_head_bn; ConvBN::sums_by_head, Conv::bn_grad).
    void set_head_bn_grad(bool on) { head_bn_grad_ = on; }
    bool head_bn_grad() const { return head_bn_grad_; }
    // kern::ConvPolicy::head_bn_dx (with head_bn_grad): the heads' conv2 store no dx, the conv1 BN's dx pass forms
    // it from the logits' gradient (ConvBN::dx_heads, Conv::dx_not_stored).
    void set_head_bn_dx(bool on) { head_bn_dx_ = on; }
    bool head_bn_dx() const { return head_bn_dx_; }
    // Marks s (declared by conv first) as taking the fused 1x1 backward in some layer (ConvUse::pw_fused_bwd).
    void conv_pw_fused_backward(const kern::ConvShape& s);
    bool pw_fused_bwd() const { return pw_fused_bwd_; }
    // NetShape::fuse_dw_pw of a CUDA network (set by the network before each pass; false on the CPU):
    // the depthwise -> 1x1 pairs (LiteBlock, DSConv) fuse the depthwise BN + activation into the 1x1 conv.
    void set_fuse_dw_pw(bool on) { fuse_dw_pw_ = on; }
    bool fuse_dw_pw() const { return fuse_dw_pw_; }
    // NetShape::fuse_up_bn of a CUDA network (set like fuse_dw_pw): a fusion up path's upsample in ConvFirst
    // order formed inside its BN passes' loads (kern::BnUpsampled), the upsampled conv output never stored.
    void set_fuse_up_bn(bool on) { fuse_up_bn_ = on; }
    bool fuse_up_bn() const { return fuse_up_bn_; }

    // Between the sizing pass and finish_sizing(): the network traces its backward on tape() (or
    // the dry run does) and plan_grads() assigns lifetimes and offsets.
    GradTape& tape() { return tape_; }
    const GradTape& tape() const { return tape_; }
    void plan_grads();
    bool grads_planned() const { return grads_planned_; }
    GradLayout grad_layout() const { return layout_; }
    const std::vector<GradSlot>& grad_slots() const { return grads_; }

    void finish_sizing();
    void finish_binding();

    const ParamTable& table() const { return table_; }
    // Flat ranges (valid after finish_sizing): table().flat_size floats each.
    float* master() const { return flat_ + 0 * table_.flat_size; }
    float* grad() const { return flat_ + 1 * table_.flat_size; }
    float* adam_m() const { return flat_ + 2 * table_.flat_size; }
    float* adam_v() const { return flat_ + 3 * table_.flat_size; }
    // bf16 working copy of the master weights (same element offsets), written by the CUDA AdamW
    // and read by the bf16 forward; unused on the CPU backend.
    kern::bf16* working() const { return working_; }
    float* buffers() const { return buffers_; }
    int64_t* counters() const { return counters_; }
    void* act_grad_base() const { return act_grads_; }
    size_t act_grad_bytes() const { return act_grad_bytes_; }
    float* workspace_base() const { return workspace_; }
    size_t act_grad_zero_bytes() const { return layout_ == GradLayout::Separate ? act_grad_bytes_ : 0; }
    size_t activation_bytes() const { return act_bytes_ + act_grad_bytes_; }
    MemoryPlan memory() const;

private:
    size_t reserve(size_t& cursor, size_t bytes);
    void record_traced_modes();
    void record_section_lanes(const std::vector<size_t>& event_slot);
    bool on_other_lanes(size_t a, size_t b) const;  // two slots a section touches from different lanes
    void record_dgrad_mode(const kern::ConvShape& s, bool overwrite);
    void* bind(uint8_t* base, size_t& cursor, size_t bytes);

    rt::MemKind kind_;
    bool dry_run_ = false;
    bool dw_fused_bn_ = false;
    bool pw_stats_ = false;
    bool dw_stats_ = false;
    bool pw_bn_bwd_ = false;
    bool pw_fused_bwd_ = false;
    bool head_bn_grad_ = false;
    bool head_bn_dx_ = false;
    bool dw_bn_grad_ = false;
    bool pw_bn_grad_ = false;
    bool dw_fused_bwd_ = false;
    bool fuse_dw_pw_ = false;
    bool fuse_up_bn_ = false;
    bool binding_ = false;
    ParamTable table_;
    size_t act_bytes_ = 0, act_grad_bytes_ = 0;
    GradLayout layout_ = GradLayout::Shared;
    GradTape tape_;
    std::vector<GradSlot> grads_;  // in declaration order (act() calls)
    bool grads_planned_ = false;
    size_t grad_dgrad_first_ = 0;
    size_t grad_copies_ = 0, grad_copied_ = 0;
    std::vector<int> write_slot_;                 // per traced write: its slot (for the replay's targets)
    std::vector<bool> write_acc_;                 // per traced write: accumulate (false: first contribution)
    std::vector<std::vector<int>> section_lane_;  // [section][slot]: the lane that touches it there, -1: none
    size_t workspace_floats_ = 0, extra_workspace_bytes_ = 0;  // per lane (rounded to 256 B when sized)
    int lanes_ = 1, lane_ = 0;
    std::vector<ConvUse> convs_;
    std::vector<LayerUse> layers_;
    std::vector<OpUse> op_uses_;
    GpuOps* ops_ = nullptr;
    // binding-pass cursors (must end where the sizing pass ended)
    size_t bind_param_ = 0, bind_act_ = 0, bind_grad_ = 0;  // bind_grad_: next slot
    size_t bind_buffer_idx_ = 0;
    std::unique_ptr<rt::Arena> params_arena_, buffers_arena_, acts_arena_, grads_arena_, ws_arena_;
    float* flat_ = nullptr;
    kern::bf16* working_ = nullptr;
    float* buffers_ = nullptr;
    int64_t* counters_ = nullptr;
    uint8_t* acts_ = nullptr;
    uint8_t* act_grads_ = nullptr;
    float* workspace_ = nullptr;
};

}  // namespace model
