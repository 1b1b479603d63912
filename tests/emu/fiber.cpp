// Fibers (tests/emu/fiber.h): an x86-64 stack switch in assembly, ucontext elsewhere, and the
// AddressSanitizer fiber annotations around every switch.
#include "tests/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

// The emulation's own files are compiled without instrumentation (speed); SFEMU_ASAN says whether
// the program around them runs under AddressSanitizer.
#if SFEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace sfemu {

namespace {

// The scheduler's side of every switch (one scheduler, on the OS thread that runs the emulation).
void* g_sched_sp = nullptr;
const void* g_sched_stack = nullptr;  // the scheduler's stack, learnt on the first switch
size_t g_sched_stack_size = 0;
#if !defined(__x86_64__)
ucontext_t g_sched_uc;
#endif

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "sfemu: %s\n", what);
    std::abort();
}

inline void before_switch(void** fake, const void* bottom, size_t size) {
#if SFEMU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

inline void after_switch(void* fake, const void** old_bottom, size_t* old_size) {
#if SFEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, old_bottom, old_size);
#else
    (void)fake, (void)old_bottom, (void)old_size;
#endif
}

struct Start {
    void (*entry)(void*);
    void* arg;
};

// The Start record at the 16-byte aligned top of a new fiber's stack (both switch implementations).
Start* place_start(Fiber& f, char* stack, size_t bytes, void (*entry)(void*), void* arg) {
    f.stack = stack;
    f.stack_size = bytes;
    const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes - sizeof(Start)) & ~uintptr_t(15);
    Start* s = reinterpret_cast<Start*>(top);
    s->entry = entry;
    s->arg = arg;
    return s;
}

// First code on a new fiber: learn the scheduler's stack for the switches back, then run.
void fiber_main(void (*entry)(void*), void* arg) {
    after_switch(nullptr, &g_sched_stack, &g_sched_stack_size);
    entry(arg);
    die("a fiber returned instead of calling fiber_exit");
}

}  // namespace

StackPool::StackPool(size_t count, size_t bytes) : count_(count), bytes_(bytes) {
    guard_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (bytes_ + guard_ - 1) / guard_ * guard_;
    total_ = count_ * (bytes_ + guard_);
    // Reserved lazily: only the pages a thread touches are ever backed.
    void* p = mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot reserve the fiber stacks");
    base_ = static_cast<char*>(p);
    // A guard page below each stack turns an overflow into a fault instead of silent corruption.
    for (size_t i = 0; i < count_; ++i)
        if (mprotect(base_ + i * (bytes_ + guard_), guard_, PROT_NONE) != 0) die("mprotect of a guard page failed");
}

StackPool::~StackPool() {
    if (base_) munmap(base_, total_);
}

#if defined(__x86_64__)

// sfemu_switch(save, to): pushes the callee-saved registers, stores rsp in *save, loads `to` and
// pops the other fiber's registers. MXCSR and the x87 control word are not switched: no emulated
// thread changes them.
extern "C" void sfemu_switch(void** save, void* to);
extern "C" void sfemu_trampoline();
asm(R"(
    .text
    .globl sfemu_switch
    .type sfemu_switch, @function
sfemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sfemu_switch, .-sfemu_switch

    .globl sfemu_trampoline
    .type sfemu_trampoline, @function
sfemu_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size sfemu_trampoline, .-sfemu_trampoline
)");

namespace {
void trampoline_target(void* p) {
    const Start* s = static_cast<const Start*>(p);
    fiber_main(s->entry, s->arg);
}
}  // namespace

void fiber_start(Fiber& f, char* stack, size_t bytes, void (*entry)(void*), void* arg) {
    // The Start record sits at the top of the stack; below it the frame sfemu_switch pops:
    // r15 r14 r13 r12 rbx rbp, then the return address (the trampoline), so that rsp is 16-byte
    // aligned after the `ret`, as the ABI wants before a call.
    Start* s = place_start(f, stack, bytes, entry, arg);
    void** sp = reinterpret_cast<void**>(s);
    *--sp = reinterpret_cast<void*>(&sfemu_trampoline);   // at top - 8: after ret, rsp = top
    *--sp = nullptr;                                      // rbp: ends frame-pointer walks
    *--sp = nullptr;                                      // rbx
    *--sp = s;                                            // r12: the argument
    *--sp = reinterpret_cast<void*>(&trampoline_target);  // r13: the function
    *--sp = nullptr;                                      // r14
    *--sp = nullptr;                                      // r15
    f.sp = sp;
}

void fiber_resume(Fiber& f) {
    void* fake = nullptr;
    before_switch(&fake, f.stack, f.stack_size);
    sfemu_switch(&g_sched_sp, f.sp);
    after_switch(fake, nullptr, nullptr);
}

void fiber_yield(Fiber& self) {
    before_switch(&self.fake_stack, g_sched_stack, g_sched_stack_size);
    sfemu_switch(&self.sp, g_sched_sp);
    after_switch(self.fake_stack, nullptr, nullptr);
}

void fiber_exit(Fiber& self) {
    before_switch(nullptr, g_sched_stack, g_sched_stack_size);  // null: this fiber's stack is done
    sfemu_switch(&self.sp, g_sched_sp);
    die("an exited fiber was resumed");
}

#else  // ucontext

namespace {
void uc_main(unsigned hi, unsigned lo) {
    const Start* s = reinterpret_cast<const Start*>((static_cast<uintptr_t>(hi) << 32) | lo);
    fiber_main(s->entry, s->arg);
}
}  // namespace

void fiber_start(Fiber& f, char* stack, size_t bytes, void (*entry)(void*), void* arg) {
    Start* s = place_start(f, stack, bytes, entry, arg);
    if (!f.uctx) f.uctx = new ucontext_t;
    ucontext_t* uc = static_cast<ucontext_t*>(f.uctx);
    getcontext(uc);
    uc->uc_stack.ss_sp = stack;
    uc->uc_stack.ss_size = reinterpret_cast<uintptr_t>(s) - reinterpret_cast<uintptr_t>(stack);
    uc->uc_link = nullptr;
    const uintptr_t a = reinterpret_cast<uintptr_t>(s);
    makecontext(uc, reinterpret_cast<void (*)()>(&uc_main), 2, static_cast<unsigned>(a >> 32),
                static_cast<unsigned>(a & 0xffffffffu));
}

void fiber_resume(Fiber& f) {
    void* fake = nullptr;
    before_switch(&fake, f.stack, f.stack_size);
    swapcontext(&g_sched_uc, static_cast<ucontext_t*>(f.uctx));
    after_switch(fake, nullptr, nullptr);
}

void fiber_yield(Fiber& self) {
    before_switch(&self.fake_stack, g_sched_stack, g_sched_stack_size);
    swapcontext(static_cast<ucontext_t*>(self.uctx), &g_sched_uc);
    after_switch(self.fake_stack, nullptr, nullptr);
}

void fiber_exit(Fiber& self) {
    before_switch(nullptr, g_sched_stack, g_sched_stack_size);
    swapcontext(static_cast<ucontext_t*>(self.uctx), &g_sched_uc);
    die("an exited fiber was resumed");
}

#endif

}  // namespace sfemu
