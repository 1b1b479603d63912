#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace rt {

namespace {
constexpr uint64_t kMaxHeader = 100u << 20;

DType parse_dtype(const std::string& s, const std::string& file, const std::string& key) {
    if (s == "F32") return DType::F32;
    if (s == "F64") return DType::F64;
    if (s == "I64") return DType::I64;
    if (s == "I32") return DType::I32;
    if (s == "BF16") return DType::BF16;
    if (s == "U8") return DType::U8;
    SF_FAIL("%s: tensor '%s' has unsupported dtype '%s'", file.c_str(), key.c_str(), s.c_str());
}
}  // namespace

const char* dtype_name(DType d) {
    switch (d) {
        case DType::F32: return "F32";
        case DType::F64: return "F64";
        case DType::I64: return "I64";
        case DType::I32: return "I32";
        case DType::BF16: return "BF16";
        case DType::U8: return "U8";
    }
    return "?";
}

size_t dtype_size(DType d) {
    switch (d) {
        case DType::F64:
        case DType::I64: return 8;
        case DType::F32:
        case DType::I32: return 4;
        case DType::BF16: return 2;
        case DType::U8: return 1;
    }
    return 0;
}

size_t TensorData::numel() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
}

std::vector<double> TensorData::to_double() const {
    const size_t n = numel();
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) {
        const uint8_t* p = bytes.data() + i * dtype_size(dtype);
        switch (dtype) {
            case DType::F32: {
                float v;
                std::memcpy(&v, p, 4);
                out[i] = v;
                break;
            }
            case DType::F64: {
                double v;
                std::memcpy(&v, p, 8);
                out[i] = v;
                break;
            }
            case DType::I64: {
                int64_t v;
                std::memcpy(&v, p, 8);
                out[i] = static_cast<double>(v);
                break;
            }
            case DType::I32: {
                int32_t v;
                std::memcpy(&v, p, 4);
                out[i] = v;
                break;
            }
            case DType::U8: out[i] = *p; break;
            case DType::BF16: {
                uint32_t bits = static_cast<uint32_t>(p[0] | (p[1] << 8)) << 16;
                float v;
                std::memcpy(&v, &bits, 4);
                out[i] = v;
                break;
            }
        }
    }
    return out;
}

SafeTensors SafeTensors::load(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SF_CHECK(f.good(), "%s: cannot open file", path.c_str());
    f.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(f.tellg());
    f.seekg(0);
    SF_CHECK(size >= 8, "%s: truncated (%llu bytes, no header length)", path.c_str(),
             static_cast<unsigned long long>(size));
    uint8_t lenb[8];
    f.read(reinterpret_cast<char*>(lenb), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | lenb[i];
    SF_CHECK(hlen <= kMaxHeader && 8 + hlen <= size, "%s: header length %llu does not fit the file (%llu bytes)",
             path.c_str(), static_cast<unsigned long long>(hlen), static_cast<unsigned long long>(size));
    std::string header(hlen, '\0');
    f.read(&header[0], static_cast<std::streamsize>(hlen));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(header);
    } catch (const std::exception& e) {
        SF_FAIL("%s: header is not valid JSON: %s", path.c_str(), e.what());
    }
    SF_CHECK(j.is_object(), "%s: header is not a JSON object", path.c_str());
    const uint64_t data_size = size - 8 - hlen;
    std::vector<uint8_t> data(data_size);
    f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data_size));
    SF_CHECK(f.good() || data_size == 0, "%s: read failed", path.c_str());

    SafeTensors st;
    st.source_ = path;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "__metadata__") {
            SF_CHECK(it.value().is_object(), "%s: __metadata__ is not an object", path.c_str());
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                SF_CHECK(m.value().is_string(), "%s: metadata '%s' is not a string", path.c_str(), m.key().c_str());
                st.metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const auto& v = it.value();
        SF_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                 "%s: tensor '%s' lacks dtype/shape/data_offsets", path.c_str(), it.key().c_str());
        TensorData t;
        t.dtype = parse_dtype(v["dtype"].get<std::string>(), path, it.key());
        for (const auto& d : v["shape"]) {
            SF_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "%s: tensor '%s' has a bad shape", path.c_str(),
                     it.key().c_str());
            t.shape.push_back(d.get<int64_t>());
        }
        const auto& off = v["data_offsets"];
        SF_CHECK(off.is_array() && off.size() == 2, "%s: tensor '%s' has bad data_offsets", path.c_str(),
                 it.key().c_str());
        const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        SF_CHECK(b <= e && e <= data_size, "%s: tensor '%s' data [%llu, %llu) outside the %llu data bytes",
                 path.c_str(), it.key().c_str(), static_cast<unsigned long long>(b), static_cast<unsigned long long>(e),
                 static_cast<unsigned long long>(data_size));
        SF_CHECK(e - b == t.numel() * dtype_size(t.dtype), "%s: tensor '%s' has %llu bytes, shape needs %zu",
                 path.c_str(), it.key().c_str(), static_cast<unsigned long long>(e - b),
                 t.numel() * dtype_size(t.dtype));
        t.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(b), data.begin() + static_cast<std::ptrdiff_t>(e));
        st.tensors_[it.key()] = std::move(t);
    }
    return st;
}

const TensorData& SafeTensors::get(const std::string& name) const {
    auto it = tensors_.find(name);
    SF_CHECK(it != tensors_.end(), "%s: no tensor named '%s'", source_.empty() ? "safetensors" : source_.c_str(),
             name.c_str());
    return it->second;
}

std::vector<std::string> SafeTensors::names() const {
    std::vector<std::string> n;
    for (const auto& kv : tensors_) n.push_back(kv.first);
    return n;
}

void SafeTensors::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
    SF_CHECK(name != "__metadata__", "tensor name '__metadata__' is reserved");
    TensorData t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    const size_t bytes = t.numel() * dtype_size(dtype);
    t.bytes.resize(bytes);
    if (bytes) std::memcpy(t.bytes.data(), data, bytes);
    tensors_[name] = std::move(t);
}

void SafeTensors::save(const std::string& path) const {
    nlohmann::json j = nlohmann::json::object();
    if (!metadata_.empty()) j["__metadata__"] = metadata_;
    uint64_t off = 0;
    for (const auto& kv : tensors_) {
        const uint64_t end = off + kv.second.bytes.size();
        j[kv.first] = {
            {"dtype", dtype_name(kv.second.dtype)}, {"shape", kv.second.shape}, {"data_offsets", {off, end}}};
        off = end;
    }
    std::string header = j.dump();
    while ((8 + header.size()) % 8) header.push_back(' ');  // align the data to 8 bytes
    // The temp name carries the process id: two processes saving one path never share a temp file.
    const std::string tmp = path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
    FILE* f = std::fopen(tmp.c_str(), "wb");
    SF_CHECK(f, "%s: cannot create file", tmp.c_str());
    uint8_t lenb[8];
    uint64_t hlen = header.size();
    for (int i = 0; i < 8; ++i) lenb[i] = static_cast<uint8_t>(hlen >> (8 * i));
    bool ok = std::fwrite(lenb, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
    for (const auto& kv : tensors_)
        ok = ok && std::fwrite(kv.second.bytes.data(), 1, kv.second.bytes.size(), f) == kv.second.bytes.size();
    ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) std::remove(tmp.c_str());
    SF_CHECK(ok, "%s: write failed", tmp.c_str());
    SF_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "%s: rename to %s failed", tmp.c_str(), path.c_str());
}

}  // namespace rt
