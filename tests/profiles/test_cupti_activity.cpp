// CUPTI activity buffers and record decoding with synthetic records (no GPU). CUPTI's own
// cuptiActivityGetNextRecord walks the buffers, exactly as in the collector: it needs no
// device, only well-formed records at ACTIVITY_RECORD_ALIGNMENT boundaries.
#include <cstring>

#include <catch2/catch.hpp>

#include "cupti_activity.hpp"
#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"

using namespace fsdptune;
using namespace fsdptune::collect;

namespace {

// Fills a buffer obtained from the pool the way CUPTI does: records back to back, each
// starting at a multiple of ACTIVITY_RECORD_ALIGNMENT.
class SyntheticBuffer {
 public:
  explicit SyntheticBuffer(ActivityBufferPool& pool) {
    std::size_t max_records = 1;
    pool.on_buffer_requested(&data_, &size_bytes_, &max_records);
    REQUIRE(max_records == 0);
    REQUIRE(size_bytes_ == pool.buffer_bytes());
    REQUIRE(reinterpret_cast<std::uintptr_t>(data_) % ActivityBufferPool::kAlignmentBytes == 0);
  }
  template <typename Record>
  void append(const Record& record) {
    REQUIRE(used_bytes_ + sizeof(Record) <= size_bytes_);
    std::memcpy(data_ + used_bytes_, &record, sizeof(Record));
    used_bytes_ += round_up_to_alignment(sizeof(Record));
  }
  void kernel(std::uint32_t correlation, std::uint64_t start_ns, std::uint64_t end_ns,
              const char* name, std::uint32_t stream = 7) {
    CuptiKernelRecord record{};
    record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    record.correlationId = correlation;
    record.start = start_ns;
    record.end = end_ns;
    record.name = name;
    record.streamId = stream;
    record.deviceId = 0;
    append(record);
  }
  void external(std::uint32_t correlation, std::uint64_t external_id) {
    CUpti_ActivityExternalCorrelation record{};
    record.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    record.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    record.correlationId = correlation;
    record.externalId = external_id;
    append(record);
  }
  void runtime(std::uint32_t correlation, std::uint64_t start_ns) {
    CUpti_ActivityAPI record{};
    record.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    record.correlationId = correlation;
    record.start = start_ns;
    record.end = start_ns + 3000;
    record.threadId = 42;
    append(record);
  }
  void memcpy_record() {  // a kind the profiler ignores
    CUpti_ActivityMemcpy6 record{};
    record.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    record.bytes = 4096;
    append(record);
  }
  std::uint8_t* data() const { return data_; }
  std::size_t used_bytes() const { return used_bytes_; }

 private:
  static std::size_t round_up_to_alignment(std::size_t bytes) {
    const std::size_t a = ActivityBufferPool::kAlignmentBytes;
    return (bytes + a - 1) / a * a;
  }
  std::uint8_t* data_ = nullptr;
  std::size_t size_bytes_ = 0;
  std::size_t used_bytes_ = 0;
};

// Decodes `record` from raw bytes, as CUPTI hands records over.
template <typename Record>
std::optional<ActivityRecord> decode_bytes(const Record& record) {
  alignas(ActivityBufferPool::kAlignmentBytes) unsigned char storage[sizeof(Record)];
  std::memcpy(storage, &record, sizeof(Record));
  return decode_cupti_record(*reinterpret_cast<const CUpti_Activity*>(storage));
}

constexpr const char* kGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64";
constexpr const char* kAllGather =
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

}  // namespace

TEST_CASE("decode_cupti_record reads kernel, API and external-correlation records",
          "[profiler][cupti]") {
  CuptiKernelRecord k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 100;
  k.end = 350;
  k.correlationId = 9;
  k.deviceId = 3;
  k.streamId = 13;
  k.name = kGemm;
  const auto decoded = decode_bytes(k);
  REQUIRE(decoded.has_value());
  CHECK(decoded->kind == ActivityKind::kKernel);
  CHECK(decoded->start_ns == 100);
  CHECK(decoded->end_ns == 350);
  CHECK(decoded->correlation_id == 9);
  CHECK(decoded->device_id == 3);
  CHECK(decoded->stream_id == 13);
  CHECK(decoded->name == kGemm);

  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  api.correlationId = 9;
  api.start = 40;
  api.threadId = 77;
  const auto decoded_api = decode_bytes(api);
  REQUIRE(decoded_api.has_value());
  CHECK(decoded_api->kind == ActivityKind::kDriverApi);
  CHECK(decoded_api->thread_id == 77);

  CUpti_ActivityExternalCorrelation ext{};
  ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ext.correlationId = 9;
  ext.externalId = encode_label({4, 1});
  const auto decoded_ext = decode_bytes(ext);
  REQUIRE(decoded_ext.has_value());
  CHECK(decoded_ext->kind == ActivityKind::kExternalCorrelation);
  CHECK(decode_label(decoded_ext->external_id) == MeasurementLabel{4, 1});

  CUpti_ActivityMemcpy6 copy{};
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  CHECK_FALSE(decode_bytes(copy).has_value());
}

TEST_CASE("a completed buffer is walked, decoded, counted and freed", "[profiler][cupti]") {
  ActivityBufferPool pool(64 * 1024);
  SyntheticBuffer buffer(pool);
  CHECK(pool.buffers_in_flight() == 1);
  // Two repetitions of op 0 (a GEMM) and one of op 1 (an all-gather whose repetition also
  // launched a fill kernel), the labels arriving after the kernels as CUPTI may deliver.
  buffer.kernel(101, 10'000, 10'480, kGemm);
  buffer.memcpy_record();
  buffer.kernel(102, 11'000, 11'500, kGemm);
  buffer.runtime(103, 11'900);
  buffer.kernel(103, 12'000, 12'050, "void at::native::fill_kernel", 20);
  buffer.kernel(104, 12'100, 14'100, kAllGather, 20);
  buffer.external(101, encode_label({0, 0}));
  buffer.external(102, encode_label({0, 1}));
  buffer.external(103, encode_label({1, 0}));
  buffer.external(104, encode_label({1, 0}));
  buffer.kernel(105, 20'000, 20'100, kGemm);  // launched outside any measurement
  pool.on_buffer_completed(buffer.data(), buffer.used_bytes(), /*dropped_records=*/2);
  CHECK(pool.buffers_in_flight() == 0);
  CHECK(pool.dropped_records() == 2);

  const auto records = pool.take_records();
  // 5 kernels + 1 runtime + 4 external correlations; the memcpy record is dropped.
  REQUIRE(records.size() == 10);
  CHECK(records[0].name == kGemm);
  CHECK(records[2].kind == ActivityKind::kRuntimeApi);
  CHECK(pool.take_records().empty());  // taken

  const CorrelatedKernels correlated = correlate_kernels(records);
  CHECK(correlated.unlabeled_kernels == 1);
  const auto gemm = repetition_samples_s(correlated, 0, 2, "gemm");
  CHECK(gemm[0] == Approx(480e-9));  // 10480 - 10000 ns
  CHECK(gemm[1] == Approx(500e-9));  // 11500 - 11000 ns
  const auto all_gather = repetition_samples_s(
      correlated, 1, 1, "all_gather",
      [](const KernelSpan& k) { return nccl_collective_from_kernel_name(k.name).has_value(); });
  CHECK(all_gather[0] == Approx(2000e-9));  // 14100 - 12100 ns, the fill kernel left out
}

TEST_CASE("records from several buffers accumulate, a null buffer is ignored",
          "[profiler][cupti]") {
  ActivityBufferPool pool(4096);
  SyntheticBuffer first(pool);
  SyntheticBuffer second(pool);
  CHECK(pool.buffers_in_flight() == 2);
  first.kernel(1, 0, 10, kGemm);
  second.kernel(2, 20, 40, kGemm);
  second.external(2, encode_label({0, 0}));
  pool.on_buffer_completed(second.data(), second.used_bytes(), 0);
  pool.on_buffer_completed(first.data(), first.used_bytes(), 0);
  pool.on_buffer_completed(nullptr, 0, 0);
  CHECK(pool.buffers_in_flight() == 0);
  const auto records = pool.take_records();
  REQUIRE(records.size() == 3);
  CHECK(records[0].correlation_id == 2);  // arrival order: the second buffer came first
  // An empty completed buffer is fine too.
  SyntheticBuffer empty(pool);
  pool.on_buffer_completed(empty.data(), 0, 0);
  CHECK(pool.take_records().empty());
}

TEST_CASE("synthetic records assemble into compute entries of a profile", "[profiler][cupti]") {
  // The collector's path for one op: label each timed repetition, decode, correlate,
  // reduce to samples, and store them under the op's signature.
  Op op;
  op.kind = OpKind::kGemm;
  op.name = "layers.0.attention.wq";
  op.dtype = DType::kBF16;
  op.gemm = {8192, 4096, 4096};
  op.flops = 2.0 * 8192 * 4096 * 4096;
  ActivityBufferPool pool(16 * 1024);
  SyntheticBuffer buffer(pool);
  const std::uint64_t starts_ns[] = {1'000'000, 2'000'000, 3'000'000};
  const std::uint64_t durations_ns[] = {480'500, 482'500, 479'000};
  for (std::uint32_t rep = 0; rep < 3; ++rep) {
    buffer.kernel(200 + rep, starts_ns[rep], starts_ns[rep] + durations_ns[rep], kGemm);
    buffer.external(200 + rep, encode_label({0, rep}));
  }
  pool.on_buffer_completed(buffer.data(), buffer.used_bytes(), 0);
  ComputeEntry entry{
      op.signature(), op,
      repetition_samples_s(correlate_kernels(pool.take_records()), 0, 3, op.signature())};
  REQUIRE(entry.samples_s.size() == 3);
  CHECK(entry.samples_s[0] == Approx(480.5e-6));
  CHECK(median_seconds(entry.samples_s) == Approx(480.5e-6));  // of 479.0, 480.5, 482.5
  Profile profile;
  profile.hardware = "h200";
  profile.compute.push_back(entry);
  profile.provenance.method = "cupti";
  // The assembled profile survives its file format unchanged.
  CHECK(profile_from_json(profile_to_json(profile), "assembled") == profile);
}

TEST_CASE("check_cupti names the call and the CUPTI error", "[profiler][cupti]") {
  CHECK_NOTHROW(check_cupti(CUPTI_SUCCESS, "cuptiActivityFlushAll"));
  try {
    check_cupti(CUPTI_ERROR_NOT_INITIALIZED, "cuptiActivityEnable");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kRuntime);
    CHECK(e.where() == "cuptiActivityEnable");
    CHECK(std::string(e.what()).find("CUPTI_ERROR_NOT_INITIALIZED") != std::string::npos);
  }
}
