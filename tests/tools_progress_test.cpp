// Progress rates (recent and average, pauses excluded), the validation progress of CountProgress
// on a terminal and in a log, the run's log file (runtime/log.h) and the closing validation table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "runtime/log.h"
#include "tests/support/compare.h"
#include "tools/progress.h"
#include "tools/run_log.h"

namespace {

double g_now = 0;
double fake_clock() { return g_now; }

std::string read_all(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Progress, RecentRateFollowsTheLastIntervalAverageTheSession) {
    tools::Progress p(1000, 100);  // resumed at step 100
    g_now = 0;
    p.set_clock(fake_clock);
    g_now = 10;
    tools::Progress::Rates r = p.rates(200);  // 100 steps in 10 s
    EXPECT_DOUBLE_EQ(r.recent, 10);
    EXPECT_DOUBLE_EQ(r.average, 10);
    g_now = 15;
    r = p.rates(300);  // the next 100 in 5 s: faster now
    EXPECT_DOUBLE_EQ(r.recent, 20);
    EXPECT_DOUBLE_EQ(r.average, 200.0 / 15);
    // A 60 s validation counts in neither rate.
    p.pause();
    g_now = 75;
    p.resume();
    g_now = 85;
    r = p.rates(400);
    EXPECT_DOUBLE_EQ(r.recent, 10);
    EXPECT_DOUBLE_EQ(r.average, 300.0 / 25);
    EXPECT_DOUBLE_EQ(p.elapsed_s(), 85);  // elapsed (and the ETA) include it
}

struct Captured {
    std::vector<std::pair<std::string, bool>> lines;
};
void capture(const std::string& line, bool live, void* ctx) {
    static_cast<Captured*>(ctx)->lines.emplace_back(line, live);
}

TEST(Progress, CountProgressInALogPrintsPeriodicLines) {
    Captured c;
    g_now = 0;
    tools::CountProgress p("validation batch", 100, /*tty=*/false, /*interval_s=*/10);
    p.set_clock(fake_clock);
    p.set_output(capture, &c);
    for (int k = 1; k <= 100; ++k) {
        g_now = 0.5 * k;  // 50 s in all: a line at 10, 20, 30, 40, 50 s
        p.tick(static_cast<uint64_t>(k));
    }
    p.finish();
    ASSERT_EQ(c.lines.size(), 5u);
    EXPECT_EQ(c.lines[0].first, "validation batch 20/100 (0:10)");
    EXPECT_FALSE(c.lines[0].second);
    EXPECT_EQ(c.lines[4].first, "validation batch 100/100 (0:50)");
}

TEST(Progress, CountProgressOnATerminalIsLiveAndErasedAtTheEnd) {
    Captured c;
    g_now = 0;
    tools::CountProgress p("validation batch", 4, /*tty=*/true);
    p.set_clock(fake_clock);
    p.set_output(capture, &c);
    g_now = 0.05;
    p.tick(1);  // within 0.1 s of the start: not shown
    g_now = 0.2;
    p.tick(2);
    g_now = 0.25;
    p.tick(3);  // throttled
    p.tick(4);  // the last one always shows
    p.finish();
    ASSERT_EQ(c.lines.size(), 3u);
    EXPECT_EQ(c.lines[0].first, "validation batch 2/4 (0:00)");
    EXPECT_TRUE(c.lines[0].second);
    EXPECT_EQ(c.lines[1].first, "validation batch 4/4 (0:00)");
    EXPECT_EQ(c.lines[2].first, "");  // erases the live line
}

TEST(RunLogFile, LogAndConsoleLinesGoToTheFileWithTheBacklogFirst) {
    const std::string dir = testing::TempDir() + "sf_log_file";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/train.log";
    const rt::LogSink old = rt::set_log_sink([](rt::LogLevel, const std::string&) {});  // keep stderr quiet
    SF_LOG_INFO("before the file: %d", 1);
    rt::open_log_file(path, false);
    SF_LOG_WARN("a warning");
    rt::console_line("validation after epoch 1: hit_le_5px 50.0%");
    rt::log_file_line("step 3/10 | progress");
    rt::close_log_file();
    SF_LOG_INFO("after the file");
    rt::set_log_sink(old);
    const std::string text = read_all(path);
    const size_t a = text.find("[slidefuse info] before the file: 1"), b = text.find("[slidefuse warn] a warning"),
                 c = text.find("validation after epoch 1"), d = text.find("step 3/10 | progress");
    ASSERT_NE(a, std::string::npos) << text;
    ASSERT_NE(b, std::string::npos) << text;
    ASSERT_NE(c, std::string::npos) << text;
    ASSERT_NE(d, std::string::npos) << text;
    EXPECT_TRUE(a < b && b < c && c < d) << text;
    EXPECT_EQ(text.find("after the file"), std::string::npos);
    // Each line starts with a UTC stamp: "2026-11-23T21:05:07Z [slidefuse info] before the file: 1".
    ASSERT_GE(a, 21u);
    EXPECT_TRUE(a == 21 || text[a - 22] == '\n') << text;
    EXPECT_EQ(text[a - 11], 'T');
    EXPECT_EQ(text.substr(a - 2, 2), "Z ");
    // Appending (a resumed run) keeps what was there.
    rt::open_log_file(path, true);
    rt::console_line("resumed");
    rt::close_log_file();
    const std::string more = read_all(path);
    EXPECT_EQ(more.rfind(text, 0), 0u);
    EXPECT_NE(more.find("resumed"), std::string::npos);
    SF_EXPECT_ERROR(rt::open_log_file(dir + "/no/such/dir/train.log", false), "cannot write the log file");
}

TEST(RunLogFile, ValidationTableFromMetrics) {
    const std::string dir = testing::TempDir() + "sf_val_table";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/metrics.jsonl";
    {
        std::ofstream f(path);
        f << R"({"step":10,"epoch":1,"loss":1.0})"
          << "\n"
          << R"({"validation":true,"epoch":1,"step":10,"mae_px":3.5,"hit_le_2px":40.0,"hit_le_5px":75.5,"best":true})"
          << "\n"
          << "not json\n"
          << R"({"validation":true,"epoch":2,"step":20,"mae_px":4.0,"hit_le_2px":38.0,"hit_le_5px":70.25,"best":false})"
          << "\n";
    }
    const std::string t = tools::validation_table(path);
    EXPECT_EQ(t,
              " epoch |    step |  mae_px | hit@2px | hit@5px   (* best so far)\n"
              "     1 |      10 |   3.500 |  40.00% |  75.50% *\n"
              "     2 |      20 |   4.000 |  38.00% |  70.25%\n");
    EXPECT_EQ(tools::validation_table(dir + "/missing.jsonl"), "");
}

TEST(RunLogFile, PlotNeverFailsTheRun) {
    // A script that fails: plot_run reports it instead of throwing.
    const std::string dir = testing::TempDir() + "sf_plot_fail";
    std::filesystem::create_directories(dir);
    setenv("SF_PLOT_METRICS", (dir + "/missing_script.py").c_str(), 1);
    std::string why;
    const rt::LogSink old = rt::set_log_sink([](rt::LogLevel, const std::string&) {});
    bool drew = true;
    EXPECT_NO_THROW(drew = tools::plot_run(dir, &why));
    rt::set_log_sink(old);
    unsetenv("SF_PLOT_METRICS");
    EXPECT_FALSE(drew);
    EXPECT_FALSE(why.empty());
}

}  // namespace
