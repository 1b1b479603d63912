// The device-free decisions of the cuDNN plans (kernels/conv_cudnn.h), on the CPU: the candidate
// filter over synthetic engine lists (behaviour notes, numerical notes, workspace sizes, refusals),
// the process-wide plan store's keying and reuse (a counting builder), and the cuDNN runtime
// version check with injected numbers.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "tests/support/compare.h"

namespace {

using kern::ConvCandidateChoice;
using kern::ConvCandidateInfo;

// A synthetic engine: its notes, whether it finalizes and its workspace.
struct FakeEngine {
    ConvCandidateInfo info;
    bool finalizes = true;
    size_t ws = 0;
};

FakeEngine eng(bool nondet, bool demoted, bool rtc, size_t ws = 0, bool finalizes = true) {
    return {{nondet, demoted, rtc}, finalizes, ws};
}

// Runs the filter over `list`, recording which indices were finalized (in order).
ConvCandidateChoice select(const std::vector<FakeEngine>& list, bool det, size_t max_ws, int limit,
                           std::vector<size_t>* finalized = nullptr) {
    std::vector<ConvCandidateInfo> info;
    for (const FakeEngine& e : list) info.push_back(e.info);
    std::vector<size_t> seen;
    const ConvCandidateChoice c = kern::conv_select_candidates(info, det, max_ws, limit, [&](size_t i, size_t* ws) {
        seen.push_back(i);
        *ws = list[i].ws;
        return list[i].finalizes;
    });
    if (finalized) *finalized = seen;
    return c;
}

TEST(ConvCandidates, TiersOrderPrecisionThenPrecompiled) {
    EXPECT_EQ(0, kern::conv_candidate_tier({false, false, false}));
    EXPECT_EQ(1, kern::conv_candidate_tier({false, false, true}));
    EXPECT_EQ(2, kern::conv_candidate_tier({false, true, false}));
    EXPECT_EQ(3, kern::conv_candidate_tier({false, true, true}));
    EXPECT_EQ(0, kern::conv_candidate_tier({true, false, false}));  // determinism is a filter, not a tier
}

TEST(ConvCandidates, RuntimeCompiledSkippedWhenPrecompiledQualify) {
    // Heuristics order: rtc, plain, rtc, plain, plain.
    const std::vector<FakeEngine> list = {eng(false, false, true), eng(false, false, false), eng(false, false, true),
                                          eng(false, false, false), eng(false, false, false)};
    std::vector<size_t> fin;
    const ConvCandidateChoice c = select(list, false, 0, 4, &fin);
    EXPECT_EQ((std::vector<size_t>{1, 3, 4}), c.kept);
    EXPECT_EQ((std::vector<size_t>{1, 3, 4}), fin) << "a runtime-compiled engine was finalized (compiled)";
    EXPECT_EQ(0, c.tier);
    EXPECT_EQ(2, c.not_tried);
}

TEST(ConvCandidates, RuntimeCompiledUsedWhenNothingElseFinalizes) {
    const std::vector<FakeEngine> list = {eng(false, false, true), eng(false, false, false, 0, false),
                                          eng(false, false, true, 64)};
    std::vector<size_t> fin;
    const ConvCandidateChoice c = select(list, false, 0, 4, &fin);
    EXPECT_EQ((std::vector<size_t>{0, 2}), c.kept);
    EXPECT_EQ((std::vector<size_t>{1, 0, 2}), fin);
    EXPECT_EQ(1, c.tier);
    EXPECT_EQ(1, c.refused);
}

TEST(ConvCandidates, FullPrecisionRuntimeCompiledBeatsDemoted) {
    const std::vector<FakeEngine> list = {eng(false, true, false), eng(false, false, true)};
    const ConvCandidateChoice c = select(list, false, 0, 4);
    EXPECT_EQ((std::vector<size_t>{1}), c.kept);
    EXPECT_EQ(1, c.tier);
    // Demoted only when nothing of full precision finalizes; precompiled demoted before compiled.
    const std::vector<FakeEngine> only_demoted = {eng(false, true, true), eng(false, true, false),
                                                  eng(false, false, false, 0, false)};
    const ConvCandidateChoice d = select(only_demoted, false, 0, 4);
    EXPECT_EQ((std::vector<size_t>{1}), d.kept);
    EXPECT_EQ(2, d.tier);
}

TEST(ConvCandidates, DeterministicExcludesNondeterministicEngines) {
    const std::vector<FakeEngine> list = {eng(true, false, false), eng(false, false, false), eng(true, false, false),
                                          eng(false, false, true)};
    std::vector<size_t> fin;
    const ConvCandidateChoice det = select(list, true, 0, 4, &fin);
    EXPECT_EQ((std::vector<size_t>{1}), det.kept);
    EXPECT_EQ(2, det.nondeterministic);
    for (size_t i : fin) EXPECT_FALSE(list[i].info.nondeterministic) << "finalized nondeterministic engine " << i;
    const ConvCandidateChoice any = select(list, false, 0, 4);
    EXPECT_EQ((std::vector<size_t>{0, 1, 2}), any.kept);
    EXPECT_EQ(0, any.nondeterministic);
    // Only nondeterministic engines: nothing qualifies in deterministic mode (never a silent fallback).
    const ConvCandidateChoice none = select({eng(true, false, false), eng(true, true, true)}, true, 0, 4);
    EXPECT_TRUE(none.kept.empty());
    EXPECT_EQ(-1, none.tier);
    EXPECT_EQ(2, none.nondeterministic);
}

TEST(ConvCandidates, WorkspaceLimitAndCap) {
    const size_t mib = size_t(1) << 20;
    const std::vector<FakeEngine> list = {eng(false, false, false, 512 * mib), eng(false, false, false, 4 * mib),
                                          eng(false, false, false, 256 * mib), eng(false, false, false, 0),
                                          eng(false, false, false, 1),         eng(false, false, false, 2)};
    const ConvCandidateChoice c = select(list, false, 256 * mib, 3);
    EXPECT_EQ((std::vector<size_t>{1, 2, 3}), c.kept) << "the limit is inclusive; the cap stops at 3";
    EXPECT_EQ(1, c.over_workspace);
    const ConvCandidateChoice unlimited = select(list, false, 0, 1);
    EXPECT_EQ((std::vector<size_t>{0}), unlimited.kept);
    // An over-limit precompiled engine does not count as a plan: the runtime-compiled tier is tried.
    const ConvCandidateChoice fallback =
        select({eng(false, false, false, 512 * mib), eng(false, false, true, mib)}, false, 256 * mib, 4);
    EXPECT_EQ((std::vector<size_t>{1}), fallback.kept);
    SF_EXPECT_ERROR(select(list, false, 0, 0), "limit");
}

// ---- the plan store ----

kern::ConvPlanStoreKey store_key(int n, bool det = false, int device = 0, size_t version = 91900) {
    kern::ConvPolicy pol = kern::run_conv_policy(det);
    const kern::ConvShape s{n, 16, 32, 32, 64, 3, 1, 1, 1, false};
    return {kern::conv_plan_key(kern::ConvOp::Fprop, s, pol), device, version};
}

TEST(ConvPlanStore, BuildsEachKeyOnceAndReusesIt) {
    kern::ConvPlanStore store;
    int calls = 0;
    auto builder = [&] {
        ++calls;
        return kern::ConvPlanChoice{"engine " + std::to_string(calls), kern::ConvAccum::Overwrite, 0.5, 4};
    };
    bool built = false;
    const kern::ConvPlanChoice a = store.get_or_build(store_key(2), builder, &built);
    EXPECT_TRUE(built);
    EXPECT_EQ("engine 1", a.engine);
    // A second network of the same process: same key, no build, the first choice.
    const kern::ConvPlanChoice b = store.get_or_build(store_key(2), builder, &built);
    EXPECT_FALSE(built);
    EXPECT_EQ("engine 1", b.engine);
    EXPECT_EQ(4, b.timed);
    EXPECT_EQ(1, calls);
    EXPECT_EQ(1u, store.builds());
    EXPECT_EQ(1u, store.hits());

    // Every part of the key selects its own entry: batch (another network size), policy, device,
    // cuDNN version, op, candidate cap.
    std::vector<kern::ConvPlanStoreKey> others = {store_key(4), store_key(2, true), store_key(2, false, 1),
                                                  store_key(2, false, 0, 91300)};
    kern::ConvPlanStoreKey k = store_key(2);
    k.plan.op = kern::ConvOp::Wgrad;
    others.push_back(k);
    k = store_key(2);
    k.plan.max_candidates = 8;
    others.push_back(k);
    k = store_key(2);
    k.plan.max_workspace = 1;
    others.push_back(k);
    for (const kern::ConvPlanStoreKey& o : others) {
        store.get_or_build(o, builder, &built);
        EXPECT_TRUE(built) << o.plan.to_string() << " device " << o.device << " cudnn " << o.cudnn_version;
    }
    EXPECT_EQ(1 + others.size(), store.size());
    EXPECT_EQ(static_cast<int>(1 + others.size()), calls);
    // All of them are hits now.
    for (const kern::ConvPlanStoreKey& o : others) store.get_or_build(o, builder, &built);
    EXPECT_EQ(static_cast<int>(1 + others.size()), calls);
}

TEST(ConvPlanStore, FailedBuildStoresNothingAndPutReplaces) {
    kern::ConvPlanStore store;
    bool built = true;
    EXPECT_THROW(store.get_or_build(
                     store_key(2), []() -> kern::ConvPlanChoice { throw std::runtime_error("no engine"); }, &built),
                 std::runtime_error);
    EXPECT_EQ(0u, store.size());
    int calls = 0;
    auto builder = [&] {
        ++calls;
        return kern::ConvPlanChoice{"engine 7", kern::ConvAccum::Overwrite, 1.0, 2};
    };
    store.get_or_build(store_key(2), builder, &built);
    EXPECT_TRUE(built);
    store.put(store_key(2), {"engine 9", kern::ConvAccum::Overwrite, 2.0, 3});
    EXPECT_EQ("engine 9", store.get_or_build(store_key(2), builder, &built).engine);
    EXPECT_FALSE(built);
    EXPECT_EQ(1, calls);
    store.clear();
    EXPECT_EQ(0u, store.size());
    EXPECT_EQ(&kern::ConvPlanStore::process(), &kern::ConvPlanStore::process());
}

TEST(ConvPlanKey, CandidateCapIsPartOfTheKey) {
    kern::ConvPolicy pol;
    EXPECT_EQ(kern::kConvDefaultCandidates, pol.max_candidates);
    const kern::ConvShape s{2, 16, 32, 32, 64, 3, 2, 1, 1, false};
    const kern::ConvPlanKey a = kern::conv_plan_key(kern::ConvOp::Fprop, s, pol);
    pol.max_candidates = 16;
    const kern::ConvPlanKey b = kern::conv_plan_key(kern::ConvOp::Fprop, s, pol);
    EXPECT_TRUE(a != b);
    EXPECT_NE(kern::ConvPlanKeyHash()(a), kern::ConvPlanKeyHash()(b));
    EXPECT_NE(std::string::npos, b.to_string().find("top16")) << b.to_string();
}

// ---- the cuDNN runtime ----

TEST(CudnnRuntime, VersionCheck) {
    std::string why, warn;
    EXPECT_TRUE(kern::cudnn_runtime_ok(91900, 91900, &why, &warn));
    EXPECT_TRUE(why.empty() && warn.empty());
    EXPECT_TRUE(kern::cudnn_runtime_ok(92100, 91900, &why, &warn));  // newer minor: fine
    EXPECT_TRUE(warn.empty());
    EXPECT_TRUE(kern::cudnn_runtime_ok(90100, 91900, &why, &warn));  // older minor: accepted, warned
    EXPECT_NE(std::string::npos, warn.find("9.1.0")) << warn;
    EXPECT_NE(std::string::npos, warn.find("9.19.0")) << warn;
    EXPECT_FALSE(kern::cudnn_runtime_ok(8907, 91900, &why, &warn));  // cuDNN 8 (8.9.7 encodes as 8907)
    EXPECT_NE(std::string::npos, why.find("install cuDNN 9")) << why;
    EXPECT_NE(std::string::npos, why.find("8.9.7")) << why;
    EXPECT_FALSE(kern::cudnn_runtime_ok(100000, 91900, &why, &warn));  // a future major: different ABI
    EXPECT_NE(std::string::npos, why.find("10.0.0")) << why;
    EXPECT_TRUE(kern::cudnn_runtime_ok(kern::kCudnnMinRuntime, 91900, &why, nullptr));
    EXPECT_FALSE(kern::cudnn_runtime_ok(0, 91900, nullptr, nullptr));  // nothing loaded
}

}  // namespace
