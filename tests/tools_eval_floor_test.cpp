// `slidefuse eval --bf16-floor`: the CPU reference with its conv weights and input rounded to bf16
// (docs/EVAL_PREDICT.md, "The bf16 floor"). Checked against an independent construction: a checkpoint
// whose conv weights this test rounds itself, run by the plain CPU model on inputs this test
// preprocesses and rounds itself; every predicted coordinate and score must be bitwise equal. Also:
// the floor differs from the plain reference (the rounding is applied), and it is refused on the
// CUDA backend with the reason.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/preprocess.h"
#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/eval_fixture.h"
#include "tests/support/temp_dir.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/eval_model.h"

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
    std::ifstream f(path);
    return json::parse(f);
}

// The checkpoint again, with every conv weight rounded to bf16 here (ParamInfo::conv_weight), saved
// in the same run folder so that its config is found.
std::string write_rounded_checkpoint(const sftest::EvalFiles& f) {
    return sftest::write_edited_checkpoint(f, 4, [](model::SiderNet& net) {
        size_t rounded = 0, changed = 0;
        for (const model::ParamInfo& info : net.table().params) {
            if (!info.conv_weight) continue;
            float* w = net.plan().master() + info.offset;
            for (size_t i = 0; i < info.numel; ++i) {
                const float r = kern::bf16_to_float(kern::float_to_bf16(w[i]));
                changed += r != w[i];
                w[i] = r;
            }
            rounded += info.numel;
        }
        EXPECT_GT(rounded, 3000000u);     // nearly all of the 3,284,270 parameters are conv weights
        EXPECT_GT(changed, rounded / 2);  // fp32 initial weights are almost never bf16-exact
    });
}

TEST(EvalFloor, EqualsThePlainReferenceOnRoundedWeightsAndInput) {
    sftest::TempDir tmp("sf_evalfloor");
    const sftest::EvalFiles f = sftest::write_eval_files(tmp.path);
    const int n = static_cast<int>(f.val.size());
    const std::string floor_csv = tmp.path + "/floor.csv", floor_json = tmp.path + "/floor.json";
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(tools::cmd_eval({"--checkpoint", f.ckpt(), "--bf16-floor", "--csv", floor_csv, "--out", floor_json,
                               "--batch-size", std::to_string(n)}),
              0);
    const std::string table = ::testing::internal::GetCapturedStdout();
    EXPECT_NE(table.find("bf16 floor"), std::string::npos) << table;
    const json j = read_json(floor_json);
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_EQ(j["bf16_floor"], true);
    EXPECT_EQ(j["samples"], n);
    const std::vector<sftest::CsvRow> floor = sftest::read_eval_csv(floor_csv);
    ASSERT_EQ(floor.size(), f.val.size());

    // The independent construction: weights rounded by this test, inputs preprocessed and rounded here.
    const std::string rounded = write_rounded_checkpoint(f);
    const tools::TrainConfig cfg = tools::load_config(f.run_config(), {});
    tools::InferenceModel m(cfg, n, tools::inspect_checkpoint(rounded));
    ASSERT_FALSE(m.bf16_floor());
    const size_t per = static_cast<size_t>(sftest::kEvalH) * sftest::kEvalW;
    std::vector<uint8_t> pixels(per * n);
    std::vector<data::Label> labels;
    for (int b = 0; b < n; ++b) {
        std::copy(f.val[b].pixels.begin(), f.val[b].pixels.end(), pixels.begin() + static_cast<long>(b * per));
        labels.push_back(f.val[b].label);
    }
    kern::preprocess_ref(n, sftest::kEvalH, sftest::kEvalW, 1, pixels.data(), labels.data(), m.input());
    for (size_t i = 0; i < per * 2 * n; ++i) m.input()[i] = kern::bf16_to_float(kern::float_to_bf16(m.input()[i]));
    std::vector<model::Decoded> d;
    m.run(d);
    ASSERT_EQ(d.size(), f.val.size());
    for (int b = 0; b < n; ++b) {
        const float want[6] = {d[b].gap_x, d[b].gap_y, d[b].slider_x, d[b].slider_y, d[b].gap_score,
                               d[b].slider_score};
        for (int k = 0; k < 6; ++k) EXPECT_EQ(floor[b].v[4 + k], want[k]) << "sample " << b << " column " << k;
    }

    // The plain reference on the original checkpoint is another network: the rounding was applied.
    const std::string plain_csv = tmp.path + "/plain.csv";
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(tools::cmd_eval({"--checkpoint", f.ckpt(), "--csv", plain_csv, "--out", tmp.path + "/plain.json",
                               "--batch-size", std::to_string(n)}),
              0);
    ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(read_json(tmp.path + "/plain.json")["bf16_floor"], false);
    const std::vector<sftest::CsvRow> plain = sftest::read_eval_csv(plain_csv);
    ASSERT_EQ(plain.size(), floor.size());
    int differ = 0;
    for (size_t b = 0; b < plain.size(); ++b)
        for (int k = 8; k < 10; ++k) differ += plain[b].v[k] != floor[b].v[k];  // the scores
    EXPECT_GT(differ, 0) << "the floor's scores equal the plain reference's: nothing was rounded";
}

TEST(EvalFloor, RefusedOnTheCudaBackendWithTheReason) {
    sftest::TempDir tmp("sf_evalfloor");
    const sftest::EvalFiles f = sftest::write_eval_files(tmp.path);
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", f.ckpt(), "--bf16-floor", "--out", tmp.path + "/x.json",
                                     "train.backend=cuda"}),
                    "bf16 floor", "train.backend=cpu");
    const tools::TrainConfig cfg = tools::load_config(f.run_config(), {"train.backend=cuda"});
    SF_EXPECT_ERROR(tools::InferenceModel(cfg, 1, tools::inspect_checkpoint(f.ckpt()), tools::InferenceOptions{true}), "needs train.backend=cpu");
}

}  // namespace
