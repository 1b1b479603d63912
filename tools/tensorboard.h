// A small TensorBoard event-file writer: scalars only, no TensorFlow or protobuf library.
// The file is a sequence of TFRecords, each
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// (little-endian; mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), whose data is a hand-encoded
// tensorflow.Event protobuf:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//             SessionLog session_log = 7; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//   SessionLog { Status status = 1; }       (START = 1: TensorBoard drops the events of later
//                                            steps that an interrupted run wrote before a resume)
// The first record is the file_version event "brain.Event:2". Read back by tensorboard's
// EventFileLoader in tests/tools/read_tfevents.py.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tools {

namespace tb {
uint32_t crc32c(const void* data, size_t n);  // CRC-32C (Castagnoli), as TFRecord uses
uint32_t masked_crc32c(const void* data, size_t n);
void put_varint(std::string& out, uint64_t v);
// The record framing around `data`.
std::string tfrecord(const std::string& data);
using Scalars = std::vector<std::pair<std::string, double>>;
// Encoded Event protobufs.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const Scalars& values);
std::string session_start_event(double wall_time, int64_t step);
}  // namespace tb

class TensorBoardWriter {
public:
    // Creates <dir>/events.out.tfevents.<unix time>.<host> holding the file_version event; a
    // session that continues at `resume_step` > 0 also writes a SessionLog START there. Throws
    // rt::Error naming the file when it cannot be written.
    explicit TensorBoardWriter(const std::string& dir, int64_t resume_step = 0);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // One event with these scalars at `step`, flushed (TensorBoard shows it while the run goes on).
    void write(int64_t step, const tb::Scalars& values);
    const std::string& path() const { return path_; }

private:
    void append(const std::string& event);

    std::string path_;
    std::FILE* f_ = nullptr;
};

}  // namespace tools
