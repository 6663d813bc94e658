// The CUDA collector: the cuda executor's kernels (cuBLAS GEMMs, attention, memory-bound
// kernels; kernels.hpp) timed on the GPU by the CUPTI Activity API, NCCL collectives timed
// by CUPTI (their kernels recognised by name) and by CUDA events, and the overlap factors
// (docs/profiling.md). One process per GPU under mpirun; rank r uses device r % count.
//
// Every timed repetition is labelled: the collector pushes an external correlation id
// (encode_label) around the launches, CUPTI emits an EXTERNAL_CORRELATION record linking
// each launch's correlation id to it, and the kernel records carry the correlation id.
// The host-side launch windows (cuptiGetTimestamp) are kept as a second route.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <cuda_runtime.h>
#include <cupti.h>
#include <fmt/format.h>
#include <nccl.h>

#include "activity.hpp"
#include "cupti_activity.hpp"
#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/units.hpp"
#include "mpi_world.hpp"

namespace fsdptune {
namespace {

void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw_runtime(call, fmt::format("{} failed: {}", call, cudaGetErrorString(status)));
}

void check_nccl(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  throw_runtime(call, fmt::format("{} failed: {}", call, ncclGetErrorString(status)),
                "set NCCL_DEBUG=INFO for details");
}

// CUPTI's buffer callbacks are plain functions: they reach the pool of the one active
// session through this pointer. Atomic: CUPTI calls the completion callback from its own
// worker thread. The callbacks stay registered after the session (CUPTI has no call to
// unregister them), and CUPTI may still hand back a buffer later -- at its at-exit flush
// -- so without a session they give no buffer (CUPTI then drops the records) and free a
// returned one (every buffer comes from ActivityBufferPool: std::aligned_alloc) instead of
// calling through a null pointer while the process exits.
std::atomic<collect::ActivityBufferPool*> g_active_pool{nullptr};

void CUPTIAPI on_buffer_requested(std::uint8_t** buffer, std::size_t* size_bytes,
                                  std::size_t* max_records) {
  collect::ActivityBufferPool* pool = g_active_pool.load();
  if (pool == nullptr) {
    *buffer = nullptr;
    *size_bytes = 0;
    *max_records = 0;
    return;
  }
  pool->on_buffer_requested(buffer, size_bytes, max_records);
}

void CUPTIAPI on_buffer_completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer,
                                  std::size_t /*size_bytes*/, std::size_t valid_bytes) {
  std::size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
  collect::ActivityBufferPool* pool = g_active_pool.load();
  if (pool == nullptr) {
    std::free(buffer);
    return;
  }
  pool->on_buffer_completed(buffer, valid_bytes, dropped);
}

// Largest bucket copy timed (bucket_copy_ops): ~4 ms on an H100/H200.
constexpr std::int64_t kMaxCopyBytes = 4 * kGiB;
constexpr CUpti_ActivityKind kActivityKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// Activity collection from construction to destruction.
class CuptiSession {
 public:
  CuptiSession() {
    FSDPTUNE_CHECK(g_active_pool.load() == nullptr, "one CUPTI session at a time");
    g_active_pool.store(&pool_);
    collect::check_cupti(cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed),
                         "cuptiActivityRegisterCallbacks");
    for (const auto kind : kActivityKinds) {
      collect::check_cupti(cuptiActivityEnable(kind), "cuptiActivityEnable");
    }
  }
  ~CuptiSession() {
    for (const auto kind : kActivityKinds) cuptiActivityDisable(kind);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_active_pool.store(nullptr);
  }
  CuptiSession(const CuptiSession&) = delete;
  CuptiSession& operator=(const CuptiSession&) = delete;

  // Runs `launch` under `label`, remembering its launch window.
  template <typename Launch>
  void labelled(collect::MeasurementLabel label, Launch&& launch) {
    std::uint64_t begin_ns = 0;
    std::uint64_t end_ns = 0;
    cuptiGetTimestamp(&begin_ns);
    collect::check_cupti(cuptiActivityPushExternalCorrelationId(
                             CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, collect::encode_label(label)),
                         "cuptiActivityPushExternalCorrelationId");
    launch();
    std::uint64_t popped = 0;
    collect::check_cupti(
        cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped),
        "cuptiActivityPopExternalCorrelationId");
    cuptiGetTimestamp(&end_ns);
    windows_.push_back({label, begin_ns, end_ns});
  }

  // Everything recorded so far, correlated to the labels. REQUIRES: the GPU work is done.
  collect::CorrelatedKernels drain() {
    collect::check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                         "cuptiActivityFlushAll");
    auto records = pool_.take_records();
    auto correlated = collect::correlate_kernels(records, windows_);
    windows_.clear();
    untimed_kernels_ += correlated.untimed_kernels;
    return correlated;
  }
  std::int64_t dropped_records() const { return pool_.dropped_records(); }
  std::int64_t untimed_kernels() const { return untimed_kernels_; }

 private:
  collect::ActivityBufferPool pool_;
  std::vector<collect::LaunchWindow> windows_;
  std::int64_t untimed_kernels_ = 0;
};

bool is_nccl(const collect::KernelSpan& kernel) {
  return collect::is_nccl_kernel_name(kernel.name);
}

// Device buffers for one collective kind at up to `max_bytes`.
class NcclCollective {
 public:
  NcclCollective(ncclComm_t comm, int ranks, std::int64_t max_bytes) : comm_(comm), ranks_(ranks) {
    check_cuda(cudaMalloc(&send_, static_cast<std::size_t>(max_bytes)), "cudaMalloc");
    check_cuda(cudaMalloc(&receive_, static_cast<std::size_t>(max_bytes)), "cudaMalloc");
    check_cuda(cudaMemset(send_, 0, static_cast<std::size_t>(max_bytes)), "cudaMemset");
  }
  ~NcclCollective() {
    cudaFree(send_);
    cudaFree(receive_);
  }
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  // All-gathers in bf16 (the param dtype on the wire), reduce-scatters and all-reduces in
  // fp32 (torchtitan's reduce dtype). `bytes` is the full buffer.
  void launch(CollectiveKind kind, std::int64_t bytes, cudaStream_t stream) {
    switch (kind) {
      case CollectiveKind::kAllGather: {
        const auto shard = static_cast<std::size_t>(bytes / 2 / ranks_);
        check_nccl(ncclAllGather(send_, receive_, shard, ncclBfloat16, comm_, stream),
                   "ncclAllGather");
        return;
      }
      case CollectiveKind::kReduceScatter: {
        const auto shard = static_cast<std::size_t>(bytes / 4 / ranks_);
        check_nccl(ncclReduceScatter(send_, receive_, shard, ncclFloat32, ncclSum, comm_, stream),
                   "ncclReduceScatter");
        return;
      }
      case CollectiveKind::kAllReduce:
        check_nccl(ncclAllReduce(send_, receive_, static_cast<std::size_t>(bytes / 4), ncclFloat32,
                                 ncclSum, comm_, stream),
                   "ncclAllReduce");
        return;
      case CollectiveKind::kSendRecv:
        break;
    }
    throw_bad_input("--collectives",
                    "the cuda collector sweeps all_gather, reduce_scatter and all_reduce only");
  }

 private:
  ncclComm_t comm_;
  int ranks_;
  void* send_ = nullptr;
  void* receive_ = nullptr;
};

ncclComm_t make_nccl_comm(const collect::MpiWorld& world) {
  ncclUniqueId id{};
  if (world.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  collect::check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, world.comm()), "MPI_Bcast");
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, world.size(), id, world.rank()), "ncclCommInitRank");
  return comm;
}

std::string version_text(int code, int major_scale, int minor_scale) {
  return fmt::format("{}.{}", code / major_scale, (code % major_scale) / minor_scale);
}

// "550.54.15" from the kernel module's banner; the NVML library is not linked so the
// binary still loads on machines without a driver.
std::string nvidia_driver_version() {
  std::ifstream banner("/proc/driver/nvidia/version");
  std::string line;
  std::getline(banner, line);
  const auto module = line.find("Kernel Module");
  if (module == std::string::npos) return "unknown";
  std::istringstream words(line.substr(module + std::string("Kernel Module").size()));
  std::string version;
  words >> version;
  return version.empty() ? "unknown" : version;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// Bucket copies beside compute, both ways (docs/profiling.md; on one GPU, no second rank):
// the largest bucket copy's kernel on the communication stream (`copy_kernel`) timed by
// CUPTI while enough of the largest GEMM to last kCover times its time alone, launched
// first on the compute stream (`kernels`), run across all of it, against its time alone in
// the profile; and that GEMM beside enough copies to last kCover times its time, against
// its time alone. Only repetitions that ran entirely beside the other count, so a slowdown
// above about kCover goes unmeasured (the provenance says so) rather than under-measured.
// Sets the copy factors of `factors` it measured; returns what it did, for the provenance.
constexpr double kCover = 10;  // the H200's copies beside GEMMs took 2.5-11x (validation.md)
std::string measure_copy_beside_compute(CuptiSession& session, const collect::MpiWorld& world,
                                        const std::vector<ComputeEntry>& compute,
                                        OpKernels& kernels, const KernelOptions& copy_kernel,
                                        std::uint32_t reps, std::uint32_t& next_measurement,
                                        ContentionFactors& factors) {
  const ComputeEntry* gemm = largest_gemm(compute);
  const ComputeEntry* copy = largest_bucket_copy(compute);
  if (gemm == nullptr || copy == nullptr) {
    return "not measured: the workload has no GEMM or no bucket copy";
  }
  const double gemm_alone_s = median_seconds(gemm->samples_s);
  const double copy_alone_s = median_seconds(copy->samples_s);
  // Launches of the covering kernel to last kCover times the covered one alone (every rank
  // the same count: the medians are already the maximum over ranks).
  auto covering = [](double covered_s, double cover_s) {
    return static_cast<int>(
        std::min(1000.0, std::ceil(kCover * covered_s / std::max(cover_s, 1e-9)) + 1));
  };
  const int gemms = covering(copy_alone_s, gemm_alone_s);
  const int copies = covering(gemm_alone_s, copy_alone_s);
  auto copier = make_cuda_kernels(copy_kernel);
  copier->run(copy->op);  // sizes its buffers before anything is timed
  copier->synchronize();
  const std::uint32_t gemms_measurement = next_measurement++;
  const std::uint32_t copy_beside_measurement = next_measurement++;
  const std::uint32_t copies_measurement = next_measurement++;
  const std::uint32_t gemm_beside_measurement = next_measurement++;
  for (std::uint32_t rep = 0; rep < reps; ++rep) {
    session.labelled({gemms_measurement, rep}, [&] {
      for (int g = 0; g < gemms; ++g) kernels.run(gemm->op);
    });
    session.labelled({copy_beside_measurement, rep}, [&] { copier->run(copy->op); });
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  for (std::uint32_t rep = 0; rep < reps; ++rep) {
    session.labelled({copies_measurement, rep}, [&] {
      for (int c = 0; c < copies; ++c) copier->run(copy->op);
    });
    session.labelled({gemm_beside_measurement, rep}, [&] { kernels.run(gemm->op); });
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  copier.reset();
  const auto correlated = session.drain();
  // The slowdown of `inner` beside `outer`, the slowest rank's; 0 when some rank had no
  // repetition entirely beside the other.
  auto slowdown = [&](std::uint32_t inner, std::uint32_t outer, double alone_s) {
    const std::vector<double> beside_s =
        collect::covered_samples_s(correlated, inner, outer, reps, {}, {});
    const double fewest = -world.max_over_ranks(-static_cast<double>(beside_s.size()));
    const double median_s = world.max_over_ranks(beside_s.empty() ? 0.0 : median_seconds(beside_s));
    return fewest >= 1 ? median_s / alone_s : 0.0;
  };
  const double copy_ratio = slowdown(copy_beside_measurement, gemms_measurement, copy_alone_s);
  const double gemm_ratio = slowdown(gemm_beside_measurement, copies_measurement, gemm_alone_s);
  auto describe = [](double ratio) {
    return ratio > 0 ? slowdown_ratio_text(ratio, kMaxCopySlowdown)
                     : std::string("not measured: no repetition ran entirely beside the other");
  };
  if (copy_ratio > 0) {
    factors.copy_slowdown_with_compute = std::clamp(copy_ratio, 1.0, kMaxCopySlowdown);
  }
  if (gemm_ratio > 0) {
    factors.compute_slowdown_with_copy = std::clamp(gemm_ratio, 1.0, kMaxCopySlowdown);
  }
  return fmt::format(
      "the {} copy kernel beside {} GEMM(s) m={} n={} k={} on another stream: {} "
      "(copy_slowdown_with_compute); the GEMM beside {} copies: {} (compute_slowdown_with_copy)",
      format_bytes(copy->op.bytes), gemms, gemm->op.gemm.m, gemm->op.gemm.n, gemm->op.gemm.k,
      describe(copy_ratio), copies, describe(gemm_ratio));
}

class CuptiCollector final : public Collector {
 public:
  std::string backend() const override { return "cuda"; }
  int rank() const override { return world_.rank(); }
  int world_size() const override { return world_.size(); }
  Profile collect(const Workload& workload, const CollectorOptions& options) override;

 private:
  collect::MpiWorld world_;
};

Profile CuptiCollector::collect(const Workload& workload, const CollectorOptions& options) {
  validate_collector_options(options);
  // Its MPI waits (barriers, the samples' reductions); a hung NCCL kernel is not one.
  world_.set_timeout(options.timeout_s);
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices < 1) {
    // As validate --backend cuda says it (a machine without a GPU or driver said only
    // "cudaGetDeviceCount failed: CUDA driver version is insufficient ...").
    throw_runtime("--backend cuda",
                  counted != cudaSuccess
                      ? fmt::format("no CUDA device is visible to this process ({})",
                                    cudaGetErrorString(counted))
                      : std::string("no CUDA device is visible to this process"),
                  "run it where a GPU is, or profile this machine with --backend cpu");
  }
  const int device = world_.rank() % devices;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t compute_stream = nullptr;
  cudaStream_t comm_stream = nullptr;
  cudaStream_t second_comm_stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&second_comm_stream, cudaStreamNonBlocking),
             "cudaStreamCreate");

  Profile profile;
  profile.hardware = options.hardware;
  CuptiSession session;
  auto kernels = make_cuda_kernels({device, compute_stream, options.attention});
  const auto reps = static_cast<std::uint32_t>(options.reps);
  std::uint32_t next_measurement = 0;

  // Compute: each distinct op, warm-up unlabelled, then `reps` labelled repetitions.
  const auto ops = ops_to_measure(workload, kMaxCopyBytes);
  const std::uint32_t first_op = next_measurement;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (std::int64_t w = 0; w < options.warmup; ++w) kernels->run(ops[i]);
    kernels->synchronize();
    for (std::uint32_t rep = 0; rep < reps; ++rep) {
      session.labelled({first_op + static_cast<std::uint32_t>(i), rep},
                       [&] { kernels->run(ops[i]); });
    }
    kernels->synchronize();
  }
  next_measurement += static_cast<std::uint32_t>(ops.size());
  {
    const auto correlated = session.drain();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string signature = ops[i].signature();
      auto samples_s = collect::repetition_samples_s(
          correlated, first_op + static_cast<std::uint32_t>(i), reps, signature);
      world_.max_over_ranks(samples_s);
      profile.compute.push_back(ComputeEntry{signature, ops[i], std::move(samples_s)});
    }
  }

  std::string collective_note = "not measured: one rank (run under mpirun -np N)";
  std::string contention_note = "defaults: not measured";
  // Copies beside compute: one GPU suffices. Kept aside while the collective factors,
  // which set the whole ContentionFactors, are measured. The copier runs copies only (no
  // cuDNN handle for it).
  ContentionFactors copy_factors;
  const std::string copy_note =
      options.measure_contention
          ? measure_copy_beside_compute(session, world_, profile.compute, *kernels,
                                        {device, comm_stream, AttentionKernel::kCublas}, reps,
                                        next_measurement, copy_factors)
          : "not measured (--no-contention)";
  const int ranks = world_.size();
  if (ranks > 1) {
    ncclComm_t comm = make_nccl_comm(world_);
    const std::vector<std::int64_t> sizes = collective_sweep_bytes(options, "cuda", ranks);
    const std::int64_t max_bytes = sizes.back();
    NcclCollective collective(comm, ranks, max_bytes);
    const std::int64_t ranks_per_node =
        options.ranks_per_node > 0 ? std::min<std::int64_t>(options.ranks_per_node, ranks)
                                   : std::min<std::int64_t>(workload.job.gpus_per_node, ranks);
    const CommGroup group{ranks, ranks_per_node};

    // Sweep: per repetition a barrier (so the kernel time is the collective, not the wait
    // for a late rank), CUDA events around the call, CUPTI on its kernels.
    std::vector<double> event_over_cupti;
    cudaEvent_t start_event = nullptr;
    cudaEvent_t stop_event = nullptr;
    check_cuda(cudaEventCreate(&start_event), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_event), "cudaEventCreate");
    for (const CollectiveKind kind : options.collective_kinds) {
      CollectiveSweep sweep{kind, group, {}};
      std::vector<std::pair<std::int64_t, std::vector<double>>> event_samples;
      const std::uint32_t first_point = next_measurement;
      for (const std::int64_t bytes : sizes) {
        const std::uint32_t measurement = next_measurement++;
        for (std::int64_t w = 0; w < options.warmup; ++w)
          collective.launch(kind, bytes, comm_stream);
        check_cuda(cudaStreamSynchronize(comm_stream), "cudaStreamSynchronize");
        std::vector<double> events_s;
        for (std::uint32_t rep = 0; rep < reps; ++rep) {
          world_.barrier();
          session.labelled({measurement, rep}, [&] {
            check_cuda(cudaEventRecord(start_event, comm_stream), "cudaEventRecord");
            collective.launch(kind, bytes, comm_stream);
            check_cuda(cudaEventRecord(stop_event, comm_stream), "cudaEventRecord");
          });
          check_cuda(cudaEventSynchronize(stop_event), "cudaEventSynchronize");
          float elapsed_ms = 0;
          check_cuda(cudaEventElapsedTime(&elapsed_ms, start_event, stop_event),
                     "cudaEventElapsedTime");
          events_s.push_back(elapsed_ms * 1e-3);
        }
        world_.max_over_ranks(events_s);
        event_samples.emplace_back(bytes, std::move(events_s));
      }
      const auto correlated = session.drain();
      for (std::size_t p = 0; p < event_samples.size(); ++p) {
        const auto measurement = first_point + static_cast<std::uint32_t>(p);
        auto samples_s = collect::repetition_samples_s(
            correlated, measurement, reps,
            fmt::format("{} {}", to_string(kind), format_bytes(event_samples[p].first)), is_nccl);
        world_.max_over_ranks(samples_s);
        event_over_cupti.push_back(median_seconds(event_samples[p].second) /
                                   median_seconds(samples_s));
        sweep.points.push_back(CollectivePoint{event_samples[p].first, std::move(samples_s)});
      }
      std::sort(
          sweep.points.begin(), sweep.points.end(),
          [](const CollectivePoint& a, const CollectivePoint& b) { return a.bytes < b.bytes; });
      profile.collectives.push_back(std::move(sweep));
    }
    cudaEventDestroy(start_event);
    cudaEventDestroy(stop_event);
    collective_note = fmt::format(
        "CUPTI NCCL kernel time, max over ranks; CUDA events / CUPTI median ratio {:.3f}",
        event_over_cupti.empty() ? 0.0 : median_seconds(event_over_cupti));

    // Overlap factors.
    const ComputeEntry* gemm = largest_gemm(profile.compute);
    const CollectiveSweep* all_gather = nullptr;
    for (const auto& sweep : profile.collectives) {
      if (sweep.kind == CollectiveKind::kAllGather && !sweep.points.empty()) all_gather = &sweep;
    }
    if (!options.measure_contention) {
      contention_note = "defaults: not measured (--no-contention)";
    } else if (gemm == nullptr || all_gather == nullptr) {
      contention_note = "defaults: not measured (needs a GEMM and an all_gather sweep)";
    } else {
      const double gemm_alone_s = median_seconds(gemm->samples_s);
      // The smallest swept all-gather that lasts 3x the GEMM, so the GEMM runs entirely
      // beside it; the largest one if none does.
      const CollectivePoint* point = &all_gather->points.back();
      for (const auto& candidate : all_gather->points) {
        if (median_seconds(candidate.samples_s) >= 3 * gemm_alone_s) {
          point = &candidate;
          break;
        }
      }
      const double single_s = median_seconds(point->samples_s);
      const std::uint32_t gemm_measurement = next_measurement++;
      const std::uint32_t comm_measurement = next_measurement++;
      const std::uint32_t pair_measurement = next_measurement++;
      const std::uint32_t gemms_measurement = next_measurement++;
      const std::uint32_t beside_measurement = next_measurement++;
      // Enough GEMMs to outlast the all-gather twice over, launched first on the compute
      // stream so that they run across its whole kernel.
      const auto gemms = static_cast<int>(
          std::min(1000.0, std::ceil(2 * single_s / std::max(gemm_alone_s, 1e-9)) + 1));
      ncclComm_t second_comm = make_nccl_comm(world_);
      {
        NcclCollective second(second_comm, ranks, point->bytes);
        for (std::uint32_t rep = 0; rep < reps; ++rep) {
          world_.barrier();
          session.labelled({comm_measurement, rep}, [&] {
            collective.launch(CollectiveKind::kAllGather, point->bytes, comm_stream);
          });
          session.labelled({gemm_measurement, rep}, [&] { kernels->run(gemm->op); });
          check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        }
        for (std::uint32_t rep = 0; rep < reps; ++rep) {
          world_.barrier();
          session.labelled({pair_measurement, rep}, [&] {
            collective.launch(CollectiveKind::kAllGather, point->bytes, comm_stream);
            second.launch(CollectiveKind::kAllGather, point->bytes, second_comm_stream);
          });
          check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        }
        for (std::uint32_t rep = 0; rep < reps; ++rep) {
          world_.barrier();
          session.labelled({gemms_measurement, rep}, [&] {
            for (int g = 0; g < gemms; ++g) kernels->run(gemm->op);
          });
          session.labelled({beside_measurement, rep}, [&] {
            collective.launch(CollectiveKind::kAllGather, point->bytes, comm_stream);
          });
          check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        }
      }
      check_nccl(ncclCommDestroy(second_comm), "ncclCommDestroy");
      const auto correlated = session.drain();
      // GEMM repetitions that ran entirely beside the all-gather's kernel.
      const std::vector<double> with_comm_s = collect::covered_samples_s(
          correlated, gemm_measurement, comm_measurement, reps, {}, is_nccl);
      const double fewest = -world_.max_over_ranks(-static_cast<double>(with_comm_s.size()));
      const double gemm_with_comm_s =
          world_.max_over_ranks(with_comm_s.empty() ? 0.0 : median_seconds(with_comm_s));
      auto pair_s = collect::repetition_samples_s(correlated, pair_measurement, reps,
                                                  "two concurrent all_gathers", is_nccl);
      world_.max_over_ranks(pair_s);
      // The all-gather's kernel beside GEMMs throughout: comm_slowdown_with_compute.
      const std::vector<double> beside_s = collect::covered_samples_s(
          correlated, beside_measurement, gemms_measurement, reps, is_nccl, {});
      const double fewest_beside = -world_.max_over_ranks(-static_cast<double>(beside_s.size()));
      const double comm_beside_s =
          world_.max_over_ranks(beside_s.empty() ? 0.0 : median_seconds(beside_s));
      std::string beside_note =
          "an all_gather beside GEMMs: not measured (no repetition ran "
          "entirely beside them)";
      double comm_slowdown = 1;
      if (fewest_beside >= 1 && single_s > 0) {
        comm_slowdown = std::clamp(comm_beside_s / single_s, 1.0, kMaxCommSlowdownWithCompute);
        beside_note =
            fmt::format("the all_gather beside {} GEMMs {}", gemms,
                        slowdown_ratio_text(comm_beside_s / single_s, kMaxCommSlowdownWithCompute));
      }
      if (fewest >= 1) {
        profile.contention = contention_from_measurements(gemm_alone_s, gemm_with_comm_s, single_s,
                                                          median_seconds(pair_s));
        contention_note = fmt::format(
            "measured: GEMM m={} n={} k={} beside a {} all_gather; "
            "two at once on two communicators; {}",
            gemm->op.gemm.m, gemm->op.gemm.n, gemm->op.gemm.k, format_bytes(point->bytes),
            beside_note);
      } else {
        const ContentionFactors defaults;
        profile.contention = contention_from_measurements(1.0, defaults.compute_slowdown_with_comm,
                                                          single_s, median_seconds(pair_s));
        contention_note =
            "comm_share_efficiency measured; compute_slowdown_with_comm default "
            "(no GEMM repetition ran entirely beside the all_gather); " +
            beside_note;
      }
      profile.contention.comm_slowdown_with_compute = comm_slowdown;
    }
    check_nccl(ncclCommDestroy(comm), "ncclCommDestroy");
  }

  profile.contention.copy_slowdown_with_compute = copy_factors.copy_slowdown_with_compute;
  profile.contention.compute_slowdown_with_copy = copy_factors.compute_slowdown_with_copy;

  // The kernels run on compute_stream and synchronize it (and destroy their cuBLAS handle,
  // bound to it) when destroyed: before the stream is.
  const std::string kernels_device = kernels->device();
  const std::string kernels_attention = kernels->attention();
  kernels.reset();
  cudaStreamDestroy(compute_stream);
  cudaStreamDestroy(comm_stream);
  cudaStreamDestroy(second_comm_stream);

  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  int driver = 0;
  int runtime = 0;
  int nccl = 0;
  std::uint32_t cupti = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  cuptiGetVersion(&cupti);
  profile.provenance.tool = options.tool;
  profile.provenance.date = options.date;
  profile.provenance.command = options.command;
  profile.provenance.method = "cupti";
  auto& environment = profile.provenance.environment;
  environment["gpu"] = properties.name;
  environment["gpus"] = std::to_string(ranks);
  environment["host"] = world_.broadcast(host_name());
  environment["driver"] = nvidia_driver_version();
  environment["driver_cuda"] = version_text(driver, 1000, 10);  // CUDA API the driver supports
  environment["cuda"] = version_text(runtime, 1000, 10);
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  environment["nccl"] = fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  environment["cupti_api"] = std::to_string(cupti);
  environment["kernels"] = kernels_device;
  if (!kernels_attention.empty()) environment["attention"] = kernels_attention;
  environment["collectives"] = collective_note;
  environment["contention"] = contention_note;
  environment["copy_beside_compute"] = copy_note;
  environment["samples"] = fmt::format(
      "{} reps after {} warm-up, CUPTI kernel time, max over "
      "ranks; {} dropped records, {} kernel records without timestamps",
      options.reps, options.warmup, session.dropped_records(), session.untimed_kernels());
  return profile;
}

}  // namespace

std::unique_ptr<Collector> make_cuda_collector() { return std::make_unique<CuptiCollector>(); }

}  // namespace fsdptune
