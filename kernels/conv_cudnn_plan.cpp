// Pure helpers of the cuDNN convolution plans (kernels/conv_cudnn.h, docs/CONV_CUDNN.md): op and
// variant names, the plan key and its hash, the accumulation variants, scratch sizes and the
// dims/strides arrays handed to cuDNN. No cuDNN or CUDA calls: CPU tests check them directly.
// The plan cache itself is in kernels/conv_cudnn.cpp.
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "runtime/error.h"
#include "runtime/hash.h"

namespace kern {

// ---- keys and pure helpers ----

const char* conv_op_name(ConvOp op) {
    switch (op) {
        case ConvOp::Fprop: return "fprop";
        case ConvOp::Dgrad: return "dgrad";
        case ConvOp::Wgrad: return "wgrad";
    }
    return "?";
}

const char* conv_accum_name(ConvAccum a) {
    switch (a) {
        case ConvAccum::Overwrite: return "overwrite(beta=0)";
        case ConvAccum::InPlace: return "in-place(beta=1)";
        case ConvAccum::ScratchBf16: return "scratch-bf16+add";
        case ConvAccum::ScratchF32: return "scratch-fp32+add";
    }
    return "?";
}

bool ConvPlanKey::operator==(const ConvPlanKey& o) const {
    const ConvShape &a = shape, &b = o.shape;
    return op == o.op && overwrite == o.overwrite && a.n == b.n && a.h == b.h && a.w == b.w && a.cin == b.cin &&
           a.cout == b.cout && a.k == b.k && a.stride == b.stride && a.pad == b.pad && a.groups == b.groups &&
           deterministic == o.deterministic && autotune == o.autotune && max_workspace == o.max_workspace &&
           max_candidates == o.max_candidates;
}

std::string ConvPlanKey::to_string() const {
    const ConvShape& s = shape;
    std::string ws;
    if (max_workspace == 0)
        ws = "ws<=inf";
    else if (max_workspace % (size_t(1) << 20) == 0)
        ws = rt::format("ws<=%zuMiB", max_workspace >> 20);
    else
        ws = rt::format("ws<=%zuB", max_workspace);
    return rt::format("%s%s n%d %dx%d c%d->%d k%d s%d p%d g%d %s %s %s top%d", conv_op_name(op),
                      overwrite ? "-overwrite" : "", s.n, s.h, s.w, s.cin, s.cout, s.k, s.stride, s.pad, s.groups,
                      deterministic ? "det" : "nondet", autotune ? "tuned" : "heur", ws.c_str(), max_candidates);
}

ConvPlanKey conv_plan_key(ConvOp op, const ConvShape& s, const ConvPolicy& policy, bool overwrite) {
    SF_CHECK(!overwrite || op == ConvOp::Dgrad, "conv_plan_key: only dgrad has an overwrite mode (got %s)",
             conv_op_name(op));
    ConvPlanKey k;
    k.op = op;
    k.overwrite = overwrite;
    k.shape = s;
    k.shape.bias = false;  // bias is the caller's: it never selects a different plan
    k.deterministic = policy.deterministic;
    k.autotune = policy.autotune;
    k.max_workspace = policy.max_workspace;
    k.max_candidates = policy.max_candidates;
    return k;
}

size_t ConvPlanKeyHash::operator()(const ConvPlanKey& k) const {
    const ConvShape& s = k.shape;
    const int64_t geometry[] = {s.n, s.h, s.w, s.cin, s.cout, s.k, s.stride, s.pad, s.groups};
    const int64_t selection[] = {static_cast<int64_t>(k.op),
                                 k.overwrite,
                                 k.deterministic,
                                 k.autotune,
                                 static_cast<int64_t>(k.max_workspace),
                                 k.max_candidates};
    uint64_t h = 0;
    for (int64_t f : geometry) h = rt::mix64(h + rt::kGoldenGamma + static_cast<uint64_t>(f));
    for (int64_t f : selection) h = rt::mix64(h + rt::kGoldenGamma + static_cast<uint64_t>(f));
    return static_cast<size_t>(h);
}

std::vector<ConvAccum> conv_accum_variants(ConvOp op, bool overwrite) {
    SF_CHECK(!overwrite || op == ConvOp::Dgrad, "conv_accum_variants: only dgrad has an overwrite mode (got %s)",
             conv_op_name(op));
    switch (op) {
        case ConvOp::Fprop: return {ConvAccum::Overwrite};
        case ConvOp::Dgrad:
            if (overwrite) return {ConvAccum::Overwrite, ConvAccum::InPlace};  // InPlace: zero dx first
            return {ConvAccum::InPlace, ConvAccum::ScratchBf16};
        case ConvOp::Wgrad: return {ConvAccum::InPlace, ConvAccum::ScratchF32, ConvAccum::ScratchBf16};
    }
    return {};
}

size_t conv_accum_tier0(ConvOp op, bool overwrite) {
    SF_CHECK(!overwrite || op == ConvOp::Dgrad, "conv_accum_tier0: only dgrad has an overwrite mode (got %s)",
             conv_op_name(op));
    if (op == ConvOp::Wgrad) return 3;  // all three: the fastest wins (docs/CONV_CUDNN.md, "Wgrad variants")
    return op == ConvOp::Fprop || overwrite ? 1 : 2;
}

void conv_check_dgrad_mode(const ConvPlanKey& prepared, bool accumulate) {
    SF_CHECK(prepared.op == ConvOp::Dgrad, "conv_check_dgrad_mode: %s is no dgrad key", prepared.to_string().c_str());
    if (prepared.overwrite == !accumulate) return;
    ConvPlanKey asked = prepared;
    asked.overwrite = !accumulate;
    SF_FAIL(
        "conv backward-data: the %s mode was asked (key %s) but only the %s mode was prepared (key %s); prepare "
        "every mode the step uses at plan time (model::ConvUse::dgrad_overwrite / dgrad_accumulate, from the "
        "gradient tape)",
        accumulate ? "accumulate" : "overwrite", asked.to_string().c_str(), accumulate ? "overwrite" : "accumulate",
        prepared.to_string().c_str());
}

size_t conv_scratch_bytes(ConvOp op, ConvAccum a, const ConvShape& s) {
    if (a == ConvAccum::Overwrite || a == ConvAccum::InPlace) return 0;
    const size_t elem = a == ConvAccum::ScratchF32 ? sizeof(float) : sizeof(bf16);
    SF_CHECK(op != ConvOp::Fprop, "conv_scratch_bytes: fprop has no scratch variant (%s)", conv_accum_name(a));
    SF_CHECK(op == ConvOp::Wgrad || a == ConvAccum::ScratchBf16, "conv_scratch_bytes: dgrad scratch is bf16, not %s",
             conv_accum_name(a));
    return (op == ConvOp::Dgrad ? s.in().numel() : s.weight_numel()) * elem;
}

ConvCudnnDims conv_cudnn_dims(const ConvShape& s) {
    s.validate();
    const int64_t n = s.n, h = s.h, w = s.w, ci = s.cin, co = s.cout, k = s.k, cg = s.cin / s.groups;
    const int64_t p = s.p(), q = s.q();
    return ConvCudnnDims{{n, ci, h, w}, {h * w * ci, 1, w * ci, ci}, {co, cg, k, k}, {k * k * cg, 1, k * cg, cg},
                         {n, co, p, q}, {p * q * co, 1, q * co, co}, {s.pad, s.pad}, {s.stride, s.stride},
                         {1, 1}};
}

}  // namespace kern
