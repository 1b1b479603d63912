// The parameter table: names, shapes and order of the original state_dict, the parameter count,
// layout conversion, and the initialisation rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "model/init.h"
#include "model/net.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

struct TsvRow {
    std::string name, shape, kind;
};

std::vector<TsvRow> read_state_dict_tsv() {
    std::ifstream f(std::string(SF_TEST_DATA_DIR) + "/sider_state_dict.tsv");
    EXPECT_TRUE(f.good()) << "tests/data/sider_state_dict.tsv missing";
    std::vector<TsvRow> rows;
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream is(line);
        TsvRow r;
        std::getline(is, r.name, '\t');
        std::getline(is, r.shape, '\t');
        std::getline(is, r.kind, '\t');
        if (!r.name.empty()) rows.push_back(r);
    }
    return rows;
}

std::string shape_string(const std::vector<int64_t>& s) {
    if (s.empty()) return "scalar";
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
    return out;
}

model::NetShape small_shape(int channels) {
    model::NetShape s;
    s.batch = 1;
    s.channels = channels;
    s.height = 32;
    s.width = 64;
    return s;
}

TEST(Params, NamesShapesAndOrderMatchTheOriginalStateDict) {
    model::SiderNet net(small_shape(2), rt::MemKind::Host);
    const auto rows = read_state_dict_tsv();
    ASSERT_EQ(rows.size(), 852u);
    std::vector<TsvRow> params, buffers;
    for (const auto& r : rows) (r.kind == "param" ? params : buffers).push_back(r);
    const model::ParamTable& t = net.table();
    ASSERT_EQ(t.params.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(t.params[i].name, params[i].name) << "parameter #" << i;
        EXPECT_EQ(shape_string(t.params[i].torch_shape), params[i].shape) << t.params[i].name;
    }
    ASSERT_EQ(t.buffers.size(), buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
        EXPECT_EQ(t.buffers[i].name, buffers[i].name) << "buffer #" << i;
        EXPECT_EQ(shape_string(t.buffers[i].torch_shape), buffers[i].shape) << t.buffers[i].name;
    }
}

TEST(Params, ParameterCount) {
    EXPECT_EQ(model::SiderNet(small_shape(2), rt::MemKind::Host).table().num_parameters(), 3284270u);
    EXPECT_EQ(model::SiderNet(small_shape(4), rt::MemKind::Host).table().num_parameters(), 3284846u);
    // Independent of the input size.
    model::NetShape s = small_shape(2);
    s.height = 64;
    s.width = 96;
    EXPECT_EQ(model::SiderNet(s, rt::MemKind::Host).table().num_parameters(), 3284270u);
}

TEST(Params, FlatLayoutIsAlignedAndDisjoint) {
    model::SiderNet net(small_shape(2), rt::MemKind::Host);
    const model::ParamTable& t = net.table();
    size_t end = 0;
    for (const auto& p : t.params) {
        EXPECT_EQ(p.offset % model::kParamAlign, 0u) << p.name;
        EXPECT_GE(p.offset, end) << p.name;
        end = p.offset + p.numel;
    }
    EXPECT_LE(end, t.flat_size);
    EXPECT_EQ(t.flat_size % model::kParamAlign, 0u);
    // The five ranges are disjoint, 64-byte aligned at every parameter start, in one allocation.
    const model::Planner& p = net.plan();
    const float* ranges[4] = {p.master(), p.grad(), p.adam_m(), p.adam_v()};
    for (int k = 0; k < 3; ++k) EXPECT_EQ(ranges[k + 1] - ranges[k], static_cast<std::ptrdiff_t>(t.flat_size));
    const char* w = reinterpret_cast<const char*>(p.working());
    EXPECT_GE(w, reinterpret_cast<const char*>(p.adam_v() + t.flat_size));
    for (const auto& info : t.params) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p.master() + info.offset) % 64, 0u) << info.name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p.working() + info.offset) % 32, 0u) << info.name;
    }
}

TEST(Params, BadShapesAreRejected) {
    model::NetShape s = small_shape(3);
    EXPECT_THROW({ model::SiderNet net(s, rt::MemKind::Host); }, rt::Error);
    s = small_shape(2);
    s.height = 48;
    try {
        model::SiderNet net(s, rt::MemKind::Host);
        FAIL() << "height 48 accepted";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
}

TEST(Layout, StorageIndexConvertsOihwToKrsc) {
    model::ParamInfo p;
    p.name = "w";
    p.torch_shape = {2, 3, 3, 3};  // O I H W
    p.numel = 54;
    p.conv_weight = true;
    // torch element (o=1, c=2, r=0, s=1) -> index ((1*3+2)*3+0)*3+1 = 46; ours ((1*3+0)*3+1)*3+2 = 32
    EXPECT_EQ(model::storage_index(p, 46), 32u);
    std::vector<float> torch(54), ours(54), back(54);
    for (size_t i = 0; i < 54; ++i) torch[i] = static_cast<float>(i);
    model::from_torch_layout(p, torch.data(), ours.data());
    model::to_torch_layout(p, ours.data(), back.data());
    EXPECT_EQ(torch, back);
    EXPECT_EQ(ours[32], 46.0f);
}

TEST(Init, ConvStdBatchNormAndFusionRules) {
    model::SiderNet net(small_shape(2), rt::MemKind::Host);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 1234, p.master(), p.buffers(), p.counters());
    for (const auto& info : net.table().params) {
        const float* w = p.master() + info.offset;
        if (info.conv_weight && info.numel >= 4096) {
            double s = 0, ss = 0;
            for (size_t i = 0; i < info.numel; ++i) {
                s += w[i];
                ss += static_cast<double>(w[i]) * w[i];
            }
            const double mean = s / info.numel, sd = std::sqrt(ss / info.numel - mean * mean);
            const double want = std::sqrt(2.0 / (info.torch_shape[0] * info.torch_shape[2] * info.torch_shape[3]));
            EXPECT_NEAR(sd / want, 1.0, 0.05) << info.name;
            EXPECT_NEAR(mean / want, 0.0, 0.05) << info.name;
        } else if (!info.conv_weight) {
            const bool one = info.name.find(".bn.weight") != std::string::npos ||
                             info.name.find("weight_a") != std::string::npos ||
                             info.name.find("weight_b") != std::string::npos;
            for (size_t i = 0; i < info.numel; ++i) ASSERT_EQ(w[i], one ? 1.0f : 0.0f) << info.name;
        }
    }
    // Effective head init (MODEL_SPEC §1.6): heatmap output conv std sqrt(2) (fan_out = 1).
    const model::ParamInfo* hm = net.table().find("dual_head.heatmap_gap.conv2.weight");
    ASSERT_NE(hm, nullptr);
    double ss = 0;
    for (size_t i = 0; i < hm->numel; ++i) ss += std::pow(p.master()[hm->offset + i], 2);
    EXPECT_NEAR(std::sqrt(ss / hm->numel), std::sqrt(2.0), 0.4);
    for (const auto& b : net.table().buffers) {
        if (b.counter) {
            EXPECT_EQ(p.counters()[b.offset], 0);
        } else {
            const float want = b.name.find("running_var") != std::string::npos ? 1.0f : 0.0f;
            EXPECT_EQ(p.buffers()[b.offset], want) << b.name;
        }
    }
}

TEST(Init, DeterministicPerSeed) {
    EXPECT_EQ(model::init_hash(1234, 0, 0), model::init_hash(1234, 0, 0));
    EXPECT_NE(model::init_hash(1234, 0, 0), model::init_hash(1235, 0, 0));
    EXPECT_NE(model::init_hash(1234, 0, 0), model::init_hash(1234, 1, 0));
    // Bit-exact agreement with the PyTorch reference's generator is checked against the goldens
    // (model_golden_test: init samples and sums).
    model::SiderNet a(small_shape(2), rt::MemKind::Host), b(small_shape(2), rt::MemKind::Host);
    model::init_parameters(a.table(), 7, a.plan().master(), a.plan().buffers(), a.plan().counters());
    model::init_parameters(b.table(), 7, b.plan().master(), b.plan().buffers(), b.plan().counters());
    EXPECT_EQ(0, std::memcmp(a.plan().master(), b.plan().master(), a.table().flat_size * sizeof(float)));
}

}  // namespace
