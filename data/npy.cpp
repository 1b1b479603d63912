// .npy parsing (see npy.h). The header dict is read by a recursive-descent parser for the few
// Python literals np.save writes, rather than by pattern matching, so that reordered keys,
// either quote style, trailing commas and odd spacing are read exactly as Python would, while
// anything else (expressions, lists, unknown keys, duplicates) is an error.
#include "data/npy.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>

#include "runtime/error.h"

namespace data {

namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMaxHeaderBytes = 1 << 20;  // np.save writes ~128; numpy itself refuses > 10000 by default

struct DTypeInfo {
    char kind;
    size_t size;
    NpyDType type;
    const char* name;
};
constexpr DTypeInfo kDTypes[] = {
    {'b', 1, NpyDType::Bool, "|b1"},    {'u', 1, NpyDType::UInt8, "|u1"},   {'i', 1, NpyDType::Int8, "|i1"},
    {'i', 2, NpyDType::Int16, "<i2"},   {'u', 2, NpyDType::UInt16, "<u2"},  {'i', 4, NpyDType::Int32, "<i4"},
    {'u', 4, NpyDType::UInt32, "<u4"},  {'i', 8, NpyDType::Int64, "<i8"},   {'u', 8, NpyDType::UInt64, "<u8"},
    {'f', 4, NpyDType::Float32, "<f4"}, {'f', 8, NpyDType::Float64, "<f8"},
};

// A Python literal as it appears in an .npy header.
struct PyValue {
    enum Kind { Str, Bool, Tuple } kind = Str;
    std::string str;
    bool b = false;
    std::vector<int64_t> ints;
};

class HeaderParser {
public:
    HeaderParser(const char* s, size_t n, const std::string& name) : s_(s), n_(n), name_(name) {}

    // {'key': value, ...} followed by whitespace up to the end.
    std::vector<std::pair<std::string, PyValue>> dict() {
        std::vector<std::pair<std::string, PyValue>> out;
        ws();
        expect('{');
        ws();
        while (!peek('}')) {
            const PyValue key = value();
            if (key.kind != PyValue::Str) fail("dict key is not a string");
            ws();
            expect(':');
            ws();
            out.emplace_back(key.str, value());
            ws();
            if (!peek('}')) {
                expect(',');
                ws();
            }
        }
        ++i_;
        ws();
        if (i_ != n_) fail("unexpected text after the dict");
        return out;
    }

private:
    [[noreturn]] void fail(const char* what) const {
        SF_FAIL("%s: malformed NPY header: %s at byte %zu of the header", name_.c_str(), what, i_);
    }
    bool peek(char c) const { return i_ < n_ && s_[i_] == c; }
    void expect(char c) {
        if (!peek(c)) {
            char msg[32];
            std::snprintf(msg, sizeof(msg), "expected '%c'", c);
            fail(msg);
        }
        ++i_;
    }
    void ws() {
        while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    }
    bool word(const char* w) {
        const size_t len = std::strlen(w);
        if (n_ - i_ < len || std::memcmp(s_ + i_, w, len) != 0) return false;
        // The word must end here (no identifier characters follow: "Truex" is not True).
        const size_t e = i_ + len;
        if (e < n_ && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) return false;
        i_ = e;
        return true;
    }
    PyValue value() {
        PyValue v;
        if (peek('\'') || peek('"')) {
            v.kind = PyValue::Str;
            const char q = s_[i_++];
            while (i_ < n_ && s_[i_] != q) {
                if (s_[i_] == '\\' || s_[i_] == '\n') fail("escape or newline inside a string");
                v.str.push_back(s_[i_++]);
            }
            expect(q);
        } else if (word("True")) {
            v.kind = PyValue::Bool;
            v.b = true;
        } else if (word("False")) {
            v.kind = PyValue::Bool;
            v.b = false;
        } else if (peek('(')) {
            v.kind = PyValue::Tuple;
            tuple(&v.ints);
        } else if (peek('[')) {
            fail("a list (structured dtype?) is not supported");
        } else {
            fail("expected a string, True, False or a tuple of ints");
        }
        return v;
    }
    // (), (5,), (2, 3), (2, 3,); "(5)" is an int in Python, not a tuple, and is rejected.
    void tuple(std::vector<int64_t>* out) {
        expect('(');
        ws();
        if (peek(')')) {
            ++i_;
            return;
        }
        for (;;) {
            out->push_back(integer());
            ws();
            if (peek(')')) {
                if (out->size() == 1) fail("'(n)' is not a tuple (a 1-d shape is written '(n,)')");
                ++i_;
                return;
            }
            expect(',');
            ws();
            if (peek(')')) {
                ++i_;
                return;
            }
        }
    }
    int64_t integer() {
        if (i_ >= n_ || !std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("expected a non-negative integer");
        if (s_[i_] == '0' && i_ + 1 < n_ && std::isdigit(static_cast<unsigned char>(s_[i_ + 1])))
            fail("integer with a leading zero");
        int64_t v = 0;
        while (i_ < n_ && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
            const int d = s_[i_++] - '0';
            if (v > (std::numeric_limits<int64_t>::max() - d) / 10) fail("integer too large");
            v = v * 10 + d;
        }
        return v;
    }

    const char* s_;
    size_t n_;
    size_t i_ = 0;
    const std::string& name_;
};

const DTypeInfo& parse_descr(const std::string& d, const std::string& name) {
    const char* n = name.c_str();
    SF_CHECK(d.size() >= 3, "%s: unsupported dtype '%s'", n, d.c_str());
    const char order = d[0], kind = d[1];
    SF_CHECK(order != '>' && order != '!', "%s: big-endian dtype '%s' is not supported (save little-endian data)", n,
             d.c_str());
    size_t size = 0;
    for (size_t k = 2; k < d.size(); ++k) {
        SF_CHECK(std::isdigit(static_cast<unsigned char>(d[k])) && size < 1000, "%s: unsupported dtype '%s'", n,
                 d.c_str());
        size = size * 10 + static_cast<size_t>(d[k] - '0');
    }
    for (const DTypeInfo& t : kDTypes) {
        if (t.kind != kind || t.size != size) continue;
        const bool order_ok = order == '<' || order == '=' || (order == '|' && size == 1);
        SF_CHECK(order_ok, "%s: unsupported dtype '%s' (byte order '%c')", n, d.c_str(), order);
        return t;
    }
    SF_FAIL("%s: unsupported dtype '%s' (supported: |b1 |u1 |i1 <i2 <u2 <i4 <u4 <i8 <u8 <f4 <f8)", n, d.c_str());
}

}  // namespace

const char* npy_dtype_name(NpyDType t) {
    for (const DTypeInfo& d : kDTypes)
        if (d.type == t) return d.name;
    return "?";
}

size_t npy_dtype_size(NpyDType t) {
    for (const DTypeInfo& d : kDTypes)
        if (d.type == t) return d.size;
    return 0;
}

std::string NpyArray::shape_str() const {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

double NpyArray::value(size_t i) const {
    const uint8_t* p = data + i * npy_dtype_size(dtype);
    switch (dtype) {
        case NpyDType::Bool:
        case NpyDType::UInt8: return p[0];
        case NpyDType::Int8: return static_cast<int8_t>(p[0]);
        case NpyDType::Int16: return static_cast<int16_t>(p[0] | (p[1] << 8));
        case NpyDType::UInt16: return static_cast<uint16_t>(p[0] | (p[1] << 8));
        case NpyDType::Int32: return static_cast<int32_t>(load_u32le(p));
        case NpyDType::UInt32: return load_u32le(p);
        case NpyDType::Int64: return static_cast<double>(static_cast<int64_t>(load_u64le(p)));
        case NpyDType::UInt64: return static_cast<double>(load_u64le(p));
        case NpyDType::Float32: return load_f32le(p);
        case NpyDType::Float64: {
            const uint64_t u = load_u64le(p);
            double d;
            std::memcpy(&d, &u, 8);
            return d;
        }
    }
    return 0;
}

void NpyArray::expect(NpyDType t, const std::vector<int64_t>& want) const {
    SF_CHECK(dtype == t, "%s: dtype '%s', expected '%s'", name.c_str(), descr.c_str(), npy_dtype_name(t));
    bool ok = want.size() == shape.size();
    for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == shape[i];
    if (ok) return;
    std::string w = "(";
    for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + (want[i] < 0 ? "*" : std::to_string(want[i]));
    w += want.size() == 1 ? ",)" : ")";
    SF_FAIL("%s: shape %s, expected %s", name.c_str(), shape_str().c_str(), w.c_str());
}

NpyArray parse_npy(const uint8_t* buf, size_t size, const std::string& name) {
    const char* n = name.c_str();
    if (!buf) size = 0;
    SF_CHECK(size >= 10, "%s: truncated NPY file (%zu bytes, no complete preamble)", n, size);
    SF_CHECK(std::memcmp(buf, kMagic, sizeof(kMagic)) == 0, "%s: not an NPY file (bad magic)", n);
    NpyArray a;
    a.name = name;
    a.major_version = buf[6];
    a.minor_version = buf[7];
    SF_CHECK((a.major_version >= 1 && a.major_version <= 3) && a.minor_version == 0,
             "%s: unsupported NPY format version %d.%d (supported: 1.0, 2.0, 3.0)", n, a.major_version,
             a.minor_version);
    const size_t len_bytes = a.major_version == 1 ? 2 : 4;
    SF_CHECK(size >= 8 + len_bytes, "%s: truncated NPY file (%zu bytes, no header length)", n, size);
    const size_t hlen = a.major_version == 1 ? static_cast<size_t>(buf[8] | (buf[9] << 8)) : load_u32le(buf + 8);
    const size_t hstart = 8 + len_bytes;
    SF_CHECK(hlen <= kMaxHeaderBytes, "%s: NPY header length %zu exceeds the %zu-byte limit", n, hlen, kMaxHeaderBytes);
    SF_CHECK(hlen <= size - hstart, "%s: truncated NPY header (%zu bytes announced, %zu present)", n, hlen,
             size - hstart);
    const char* h = reinterpret_cast<const char*>(buf + hstart);
    SF_CHECK(hlen > 0 && h[hlen - 1] == '\n', "%s: malformed NPY header: it does not end with a newline", n);

    bool has_descr = false, has_fortran = false, has_shape = false;
    bool fortran = false;
    for (const auto& kv : HeaderParser(h, hlen, name).dict()) {
        const std::string& k = kv.first;
        const PyValue& v = kv.second;
        bool* seen = k == "descr"           ? &has_descr
                     : k == "fortran_order" ? &has_fortran
                     : k == "shape"         ? &has_shape
                                            : nullptr;
        SF_CHECK(seen, "%s: NPY header has an unexpected key '%s'", n, k.c_str());
        SF_CHECK(!*seen, "%s: NPY header repeats the key '%s'", n, k.c_str());
        *seen = true;
        if (k == "descr") {
            SF_CHECK(v.kind == PyValue::Str,
                     "%s: NPY header 'descr' is not a string (structured dtypes are not supported)", n);
            a.descr = v.str;
        } else if (k == "fortran_order") {
            SF_CHECK(v.kind == PyValue::Bool, "%s: NPY header 'fortran_order' is not True or False", n);
            fortran = v.b;
        } else {
            SF_CHECK(v.kind == PyValue::Tuple, "%s: NPY header 'shape' is not a tuple of ints", n);
            a.shape = v.ints;
        }
    }
    SF_CHECK(has_descr && has_fortran && has_shape, "%s: NPY header lacks the key '%s'", n,
             !has_descr     ? "descr"
             : !has_fortran ? "fortran_order"
                            : "shape");
    const DTypeInfo& t = parse_descr(a.descr, name);
    a.dtype = t.type;
    SF_CHECK(!fortran, "%s: fortran_order True (column-major data) is not supported; save a C-order array", n);

    a.data_offset = hstart + hlen;
    const size_t avail = size - a.data_offset;
    // Every product is bounded by the bytes present before it is formed, so nothing overflows.
    bool zero = false, fits = true;
    for (int64_t d : a.shape) zero = zero || d == 0;
    a.numel = 1;
    for (size_t k = 0; !zero && fits && k < a.shape.size(); ++k) {
        const uint64_t d = static_cast<uint64_t>(a.shape[k]);
        fits = d <= avail / (a.numel * t.size);
        if (fits) a.numel *= static_cast<size_t>(d);
    }
    if (zero) a.numel = 0;
    SF_CHECK(fits, "%s: data size mismatch: shape %s of '%s' needs more than the %zu bytes after the header", n,
             a.shape_str().c_str(), a.descr.c_str(), avail);
    a.bytes = a.numel * t.size;
    SF_CHECK(a.bytes == avail,
             "%s: data size mismatch: shape %s of '%s' needs %zu bytes, the file has %zu after the header", n,
             a.shape_str().c_str(), a.descr.c_str(), a.bytes, avail);
    a.data = buf + a.data_offset;
    return a;
}

NpyFile::NpyFile(const std::string& path) : file_(path) { array_ = parse_npy(file_.data(), file_.size(), path); }

}  // namespace data
