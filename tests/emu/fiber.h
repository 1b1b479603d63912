// Fibers for the emulated CUDA threads (tests/emu/engine.cpp): one stack per thread of a block,
// switched cooperatively on one OS thread. x86-64 switches with a few instructions (no system call;
// glibc's swapcontext makes two per switch, measured ~25x slower: docs/EMULATION.md); other
// architectures use ucontext. Every switch is announced to AddressSanitizer so it tracks the
// stack in use.
#pragma once
#include <cstddef>

namespace sfemu {

struct Fiber {
    void* sp = nullptr;     // saved stack pointer while suspended
    char* stack = nullptr;  // lowest usable address
    size_t stack_size = 0;
    void* fake_stack = nullptr;  // AddressSanitizer's bookkeeping across a switch
    void* uctx = nullptr;        // ucontext_t when not on x86-64
};

// Pool of `count` stacks of `bytes` each (plus a guard page below each), reused by every block.
class StackPool {
public:
    StackPool(size_t count, size_t bytes);
    ~StackPool();
    StackPool(const StackPool&) = delete;
    StackPool& operator=(const StackPool&) = delete;
    char* stack(size_t i) const { return base_ + i * (bytes_ + guard_) + guard_; }
    size_t bytes() const { return bytes_; }

private:
    char* base_ = nullptr;
    size_t count_, bytes_, guard_, total_ = 0;
};

// Prepares f to run entry(arg) on its stack when first resumed. entry must end with fiber_exit().
void fiber_start(Fiber& f, char* stack, size_t bytes, void (*entry)(void*), void* arg);
// Scheduler side: runs f until it calls fiber_yield() or fiber_exit().
void fiber_resume(Fiber& f);
// Fiber side: back to the scheduler; returns when resumed again.
void fiber_yield(Fiber& self);
// Fiber side: back to the scheduler for good (the stack may be reused at once). It never returns,
// but is not declared [[noreturn]]: AddressSanitizer would unpoison the whole stack before each
// call (__asan_handle_no_return), a third of the emulation's time.
void fiber_exit(Fiber& self);

}  // namespace sfemu
