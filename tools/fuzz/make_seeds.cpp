// Writes the seed corpora for the fuzz targets (run_fuzz.sh): small valid NPY files in every
// supported version and dtype plus a few invalid ones, and small valid shards (gray, RGB, 4-bit,
// empty). usage: make_seeds NPY_DIR SHARD_DIR
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/shard.h"

namespace {

void write_npy(const std::string& path, int major, const std::string& dict, const std::vector<uint8_t>& data) {
    const size_t len_bytes = major == 1 ? 2 : 4;
    std::string h = dict;
    while ((8 + len_bytes + h.size() + 1) % 64) h.push_back(' ');
    h.push_back('\n');
    std::string b = std::string("\x93NUMPY", 6) + char(major) + char(0);
    for (size_t i = 0; i < len_bytes; ++i) b.push_back(static_cast<char>(h.size() >> (8 * i)));
    b += h;
    b.append(data.begin(), data.end());
    std::ofstream(path, std::ios::binary) << b;
}

std::string dict(const std::string& descr, const std::string& shape, const char* fortran = "False") {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: make_seeds NPY_DIR SHARD_DIR\n");
        return 1;
    }
    const std::string npy = argv[1], shard = argv[2];
    std::vector<uint8_t> d(48);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 37);
    auto first = [&](size_t n) { return std::vector<uint8_t>(d.begin(), d.begin() + n); };
    write_npy(npy + "/f4_v1.npy", 1, dict("<f4", "(2, 3)"), first(24));
    write_npy(npy + "/f8_v2.npy", 2, dict("<f8", "(5,)"), first(40));
    write_npy(npy + "/u1_v3.npy", 3, dict("|u1", "()"), first(1));
    write_npy(npy + "/i8.npy", 1, dict("<i8", "(1, 2, 1)"), first(16));
    write_npy(npy + "/i4.npy", 1, dict("<i4", "(0,)"), {});
    write_npy(npy + "/b1.npy", 1, dict("|b1", "(4,)"), {1, 0, 1, 1});
    write_npy(npy + "/reordered.npy", 1, "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<u2\"}", first(4));
    write_npy(npy + "/fortran.npy", 1, dict("<f4", "(2, 3)", "True"), first(24));
    write_npy(npy + "/bigendian.npy", 1, dict(">f4", "(2,)"), first(8));

    data::ShardSpec gray;
    gray.height = 8, gray.width = 16;
    data::ShardSpec rgb = gray;
    rgb.channels = 3;
    data::ShardSpec q4 = gray;
    q4.quant4 = true;
    const std::pair<const char*, data::ShardSpec> specs[] = {{"gray", gray}, {"rgb", rgb}, {"quant4", q4}};
    for (const auto& s : specs) {
        data::ShardWriter w(shard + "/" + s.first + ".sfshard", s.second);
        std::vector<uint8_t> px(static_cast<size_t>(s.second.height) * s.second.width * s.second.channels);
        for (int i = 0; i < 2; ++i) {
            for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<uint8_t>(k * 7 + i);
            data::Label l;
            l.gap_x = 10.5f, l.gap_y = 4.25f, l.slider_x = 2.f, l.slider_y = 4.f, l.angle_rad = 0.01f;
            l.num_fakes = i + 1;
            l.fake_x[0] = 6, l.fake_y[0] = 3, l.fake_x[1] = 12, l.fake_y[1] = 5;
            l.rect_x0 = 0, l.rect_y0 = 1, l.rect_x1 = 16, l.rect_y1 = 7;
            w.add(px.data(), l);
        }
        w.finish();
    }
    data::ShardWriter(shard + "/empty.sfshard", gray).finish();
    // fuzz_shard reads a mode byte first (bit 0: fix the header CRC, bit 1: fix record CRCs).
    for (const char* name : {"gray", "rgb", "quant4", "empty"}) {
        const std::string p = shard + "/" + name + ".sfshard";
        std::ifstream in(p, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(p + ".mode0", std::ios::binary) << '\x00' << bytes;
        std::ofstream(p + ".mode3", std::ios::binary) << '\x03' << bytes;
        std::remove(p.c_str());
    }
    return 0;
}
