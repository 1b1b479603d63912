// Arena rules: plan -> allocate -> seal; alignment; no reservation or allocation afterwards.
#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/arena.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

TEST(Arena, ReservesAlignedOffsetsAndZeroFills) {
    rt::Arena a("test", rt::MemKind::Host);
    const size_t o1 = a.reserve(3, 1, "three bytes");
    const size_t o2 = a.reserve(16, 64, "aligned");
    const size_t o3 = a.reserve(8, 8, "eight");
    EXPECT_EQ(o1, 0u);
    EXPECT_EQ(o2, 64u);
    EXPECT_EQ(o3, 80u);
    EXPECT_EQ(a.size(), 88u);
    a.allocate();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.base()) % 256, 0u);
    const uint8_t* p = a.ptr<uint8_t>(0);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(p[i], 0) << "byte " << i;
    EXPECT_EQ(a.ptr<uint8_t>(o2), p + 64);
}

TEST(Arena, ReserveAfterAllocateThrows) {
    rt::Arena a("acts", rt::MemKind::Host);
    a.reserve(128, 16, "x");
    a.allocate();
    try {
        a.reserve(4, 4, "late tensor");
        FAIL() << "expected rt::Error";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("late tensor"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("acts"), std::string::npos) << e.what();
    }
}

TEST(Arena, AllocationAfterSealThrows) {
    rt::Arena a("params", rt::MemKind::Host);
    a.reserve(64, 16, "w");
    a.allocate();
    a.seal();
    EXPECT_EQ(a.state(), rt::Arena::State::Sealed);
    EXPECT_THROW(a.allocate(), rt::Error);
    EXPECT_THROW(a.reserve(4, 4, "after seal"), rt::Error);
    EXPECT_NO_THROW(a.ptr<float>(0));  // pointers stay valid after seal
}

TEST(Arena, PointerBeforeAllocateAndOutOfRangeThrow) {
    rt::Arena a("io", rt::MemKind::Host);
    a.reserve(32, 16, "slot");
    EXPECT_THROW(a.at(0), rt::Error);
    a.allocate();
    EXPECT_THROW(a.at(33), rt::Error);
    EXPECT_NO_THROW(a.at(32));
}

TEST(Arena, SealNeedsAllocateAndAlignmentMustBePowerOfTwo) {
    rt::Arena a("ws", rt::MemKind::Host);
    EXPECT_THROW(a.seal(), rt::Error);
    EXPECT_THROW(a.reserve(8, 3, "odd"), rt::Error);
    EXPECT_THROW(a.reserve(8, 512, "too wide"), rt::Error);
    a.allocate();
    EXPECT_THROW(a.allocate(), rt::Error);  // allocate() twice
}

TEST(Arena, EmptyArenaAllocates) {
    rt::Arena a("empty", rt::MemKind::Host);
    a.allocate();
    a.seal();
    EXPECT_EQ(a.size(), 0u);
}

}  // namespace
