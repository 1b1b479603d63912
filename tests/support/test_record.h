// The per-test record a suite runner reads when a test process may not finish (tools/suite_runner.py,
// docs/GPU_VERIFICATION.md "A suite that survives its failures").
//
// With SF_TEST_RECORD=FILE in the environment, every test binary that links the test support appends
// one JSON line to FILE when a test starts and one when it ends (result, milliseconds, failure
// messages), flushed at once: a process that crashes, hangs or is killed leaves behind which tests ended
// and in which one it stopped, which gtest's own JSON (written at the end) cannot. After each test it
// also asks the CUDA runtime, where a device is present, whether the context still works: a kernel's
// illegal address, a device-side assert or another sticky error ends every later CUDA call of the
// process with the same error, so the test that left it is recorded as failed ("context_lost") and the
// process exits at once with status 3, for the runner to run the remaining tests in a new process.
// Without SF_TEST_RECORD nothing changes.
#pragma once

#include <string>

namespace sftest {

// Installs the listener (once; a no-op without SF_TEST_RECORD). Called from the support library's
// static registration, so every test binary that links it has the record.
void install_test_record();

// The sticky error that makes the CUDA context unusable, as "cudaErrorX: description", or "" when the
// context works (also "" without a device or a CUDA context). A non-sticky error left pending by the
// test is cleared and reported through `left` when given.
std::string cuda_context_lost(std::string* left = nullptr);

}  // namespace sftest
