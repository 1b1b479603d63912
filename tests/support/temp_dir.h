// Test support: a fresh folder under /tmp for one test, deleted with everything in it when the
// test ends (checkpoints are ~40 MB each); SF_KEEP_TEST_FILES=1 keeps it for inspection.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace sftest {

struct TempDir {
    std::string path;
    explicit TempDir(const std::string& prefix = "sf_test") {
        std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
        const char* d = mkdtemp(tmpl.data());
        EXPECT_NE(d, nullptr) << "mkdtemp(" << tmpl << ") failed";
        path = d ? d : "/nonexistent";
    }
    ~TempDir() {
        std::error_code ec;
        // A test may have made the folder read-only (unwritable-output checks): give it back first.
        std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
        if (!std::getenv("SF_KEEP_TEST_FILES")) std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

}  // namespace sftest
