// Arena: one allocation per memory region, planned up front (DESIGN §3).
//   plan:     reserve(bytes, align) returns a byte offset; nothing is allocated yet.
//   allocate: one host/pinned/device allocation covering every reservation, zero-filled.
//   seal:     the layout is final; reserve() or allocate() afterwards throws.
// Pointers handed out after allocate() never change, which is what makes one-time CUDA-graph
// capture possible.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rt {

enum class MemKind { Host, Pinned, Device };
const char* mem_kind_name(MemKind k);

class Arena {
public:
    enum class State { Planning, Allocated, Sealed };

    Arena(std::string name, MemKind kind);
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    // Reserves `bytes` at an offset aligned to `align` (a power of two). Planning state only.
    size_t reserve(size_t bytes, size_t align, const char* what);
    void allocate();
    void seal();

    // Address of a reserved offset. Valid after allocate(); offset must lie inside the arena.
    void* at(size_t offset) const;
    template <class T>
    T* ptr(size_t offset) const {
        return static_cast<T*>(at(offset));
    }

    const std::string& name() const { return name_; }
    MemKind kind() const { return kind_; }
    State state() const { return state_; }
    size_t size() const { return size_; }
    void* base() const { return base_; }

private:
    std::string name_;
    MemKind kind_;
    State state_ = State::Planning;
    size_t size_ = 0;
    void* base_ = nullptr;
};

}  // namespace rt
