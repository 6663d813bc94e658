// The cpu collector: the cpu executor's kernels (Eigen GEMMs, memory-bound loops; see
// kernels.hpp), MPI collectives and a steady clock, so that the CPU validation loop
// predicts with costs measured the way it runs (docs/profiling.md "The CPU profile").
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <Eigen/Core>

#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/mpi_count.hpp"
#include "fsdptune/polling.hpp"
#include "fsdptune/units.hpp"
#include "mpi_world.hpp"

namespace fsdptune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Involuntary context switches of the calling thread so far: the kernel took its core for
// another runnable thread (getrusage(2), RUSAGE_THREAD, Linux).
long involuntary_switches() {
  rusage usage{};
  if (getrusage(RUSAGE_THREAD, &usage) != 0) return 0;
  return usage.ru_nivcsw;
}

// Times a compute repetition held to its core: tries up to kComputeAttempts times and keeps
// the first run during which the thread was not switched out involuntarily.
constexpr int kComputeAttempts = 5;
// Largest bucket copy timed (bucket_copy_ops): a 256 MiB memcpy takes tens of ms here.
constexpr std::int64_t kMaxCopyBytes = 256 * kMiB;

// Runs `op` over and over on a thread of its own (with its own OpKernels, one per thread)
// from construction until stop() or destruction: the load a task beside a timed one puts
// on the host, as the cpu executor's other thread does. The constructor returns once the
// thread has run `op` once (sized its operands), so no allocation is timed.
class BackgroundLoop {
 public:
  BackgroundLoop(const Op& op, AttentionKernel attention)
      : thread_([this, op, attention] {
          try {
            auto kernels = make_cpu_kernels({0, nullptr, attention});
            kernels->run(op);
            started_ = true;
            while (!stop_) kernels->run(op);
          } catch (...) {
            error_ = std::current_exception();
            started_ = true;
          }
        }) {
    while (!started_) std::this_thread::yield();
  }
  BackgroundLoop(const BackgroundLoop&) = delete;
  BackgroundLoop& operator=(const BackgroundLoop&) = delete;
  ~BackgroundLoop() { halt(); }
  // Ends the loop; rethrows what the thread threw.
  void stop() {
    halt();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void halt() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// One MPI collective on fp32 buffers sized for `bytes` (the full buffer, nccl-tests
// convention), the calls the cpu executor makes for the same collective kinds.
class MpiCollective {
 public:
  MpiCollective(const collect::MpiWorld& world, CollectiveKind kind, std::int64_t bytes, int ranks,
                MPI_Comm comm)
      : world_(&world), kind_(kind), comm_(comm), ranks_(ranks) {
    elements_ = bytes / 4;
    shard_elements_ = elements_ / ranks;
    count_ = call_count(kind, bytes, ranks);
    const bool full_input = kind != CollectiveKind::kAllGather;
    send_.assign(static_cast<std::size_t>(full_input ? elements_ : shard_elements_), 1.0f);
    const bool full_output = kind != CollectiveKind::kReduceScatter;
    receive_.assign(static_cast<std::size_t>(full_output ? elements_ : shard_elements_), 0.0f);
  }

  // Starts the collective and waits for it as the cpu executor does (poll_until, the same
  // sleeps between tests): a blocking MPI call would spin on its core and steal the cycles
  // of the compute thread beside it, and a collective progresses only when tested, so
  // other sleeps would time another collective than the replay runs.
  void run() {
    MPI_Request request = MPI_REQUEST_NULL;
    const char* call = "";
    switch (kind_) {
      case CollectiveKind::kAllGather: {
        call = "MPI_Iallgather";
        collect::check_mpi(MPI_Iallgather(send_.data(), count_, MPI_BYTE, receive_.data(), count_,
                                          MPI_BYTE, comm_, &request),
                           call);
        break;
      }
      case CollectiveKind::kReduceScatter:
        call = "MPI_Ireduce_scatter_block";
        collect::check_mpi(MPI_Ireduce_scatter_block(send_.data(), receive_.data(), count_,
                                                     MPI_FLOAT, MPI_SUM, comm_, &request),
                           call);
        break;
      case CollectiveKind::kAllReduce:
        call = "MPI_Iallreduce";
        collect::check_mpi(MPI_Iallreduce(send_.data(), receive_.data(), count_, MPI_FLOAT, MPI_SUM,
                                          comm_, &request),
                           call);
        break;
      case CollectiveKind::kSendRecv:
        throw_bad_input("--collectives",
                        "the cpu collector sweeps all_gather, reduce_scatter and all_reduce only");
    }
    world_->wait(request, call, "running a collective");
  }
  int ranks() const { return ranks_; }

  // The count of the MPI call of `kind` for a collective of `bytes` over `ranks`: the
  // shard's bytes (all-gather, as MPI_BYTE), the shard's floats (reduce-scatter), all the
  // floats (all-reduce). Error(kBadInput) naming --sizes where MPI's int cannot hold it.
  static int call_count(CollectiveKind kind, std::int64_t bytes, int ranks) {
    const std::int64_t elements = bytes / 4;
    const std::int64_t count = kind == CollectiveKind::kAllGather       ? elements / ranks * 4
                               : kind == CollectiveKind::kReduceScatter ? elements / ranks
                                                                        : elements;
    if (count <= kMaxMpiCount) return static_cast<int>(count);
    throw_bad_input(
        "--sizes",
        fmt::format("{} of {} over {} ranks: its MPI call's count would be {} {}, more than "
                    "an int count takes ({})",
                    to_string(kind), format_bytes(bytes), ranks, count,
                    kind == CollectiveKind::kAllGather ? "bytes" : "floats", kMaxMpiCount),
        "sweep the cpu backend's collectives up to 2GiB per rank's shard");
  }

 private:
  const collect::MpiWorld* world_;
  CollectiveKind kind_;
  MPI_Comm comm_;
  int ranks_;
  std::int64_t elements_ = 0;
  std::int64_t shard_elements_ = 0;
  int count_ = 0;  // the MPI call's count
  std::vector<float> send_;
  std::vector<float> receive_;
};

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(' '));
        return name;
      }
    }
  }
  return "unknown";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  return version.substr(0, version.find_first_of(",\n"));
}

class CpuCollector final : public Collector {
 public:
  std::string backend() const override { return "cpu"; }
  int rank() const override { return world_.rank(); }
  int world_size() const override { return world_.size(); }
  Profile collect(const Workload& workload, const CollectorOptions& options) override;

 private:
  // Samples of a collective `run` after `warmup` untimed repetitions, one per repetition:
  // the slowest rank's time (a collective ends on every rank only when the last one has
  // taken part). The ranks start every repetition together (a barrier).
  template <typename Run>
  std::vector<double> time_on_all_ranks(const CollectorOptions& options, Run&& run) {
    for (std::int64_t i = 0; i < options.warmup; ++i) run();
    std::vector<double> samples_s;
    for (std::int64_t rep = 0; rep < options.reps; ++rep) {
      world_.barrier();
      const auto start = Clock::now();
      run();
      samples_s.push_back(seconds_since(start));
    }
    world_.max_over_ranks(samples_s);
    return samples_s;
  }

  std::int64_t ranks_per_node(const CollectorOptions& options) const;
  std::string measure_contention(const std::vector<ComputeEntry>& compute,
                                 const CollectorOptions& options, OpKernels& kernels,
                                 ContentionFactors& factors);
  std::string measure_comm_beside_compute(const std::vector<ComputeEntry>& compute,
                                          const CollectorOptions& options,
                                          ContentionFactors& factors);
  std::string measure_copy_beside_compute(const std::vector<ComputeEntry>& compute,
                                          const CollectorOptions& options,
                                          ContentionFactors& factors);
  // This rank's samples of `timed`, every rank's gathered: `warmup` untimed runs, then
  // `reps` repetitions alone, `reps` while another thread runs `beside` over and over, and
  // `reps` alone again (the alone samples bracket the others against the host's drift);
  // the ranks start each repetition together (a barrier). The other thread runs
  // continuously, as the cpu executor's compute thread does beside its communication
  // thread: woken and put to sleep between repetitions instead, the ratios came out
  // bimodal (1.00x or 1.9x from one profile to the next) on the 2-core CI host.
  struct AloneBeside {
    std::vector<double> alone_s, beside_s;
  };
  AloneBeside time_alone_and_beside(const Op& timed, const Op& beside,
                                    const CollectorOptions& options);

  collect::MpiWorld world_;
};

std::int64_t CpuCollector::ranks_per_node(const CollectorOptions& options) const {
  if (options.ranks_per_node > 0)
    return std::min<std::int64_t>(options.ranks_per_node, world_.size());
  // The ranks sharing this host's memory: the CPU analogue of an NVLink domain.
  MPI_Comm shared;
  collect::check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared),
      "MPI_Comm_split_type");
  int shared_size = 1;
  MPI_Comm_size(shared, &shared_size);
  MPI_Comm_free(&shared);
  return static_cast<std::int64_t>(world_.max_over_ranks(static_cast<double>(shared_size)));
}

Profile CpuCollector::collect(const Workload& workload, const CollectorOptions& options) {
  validate_collector_options(options);
  world_.set_timeout(options.timeout_s);
  if (options.stall_rank == world_.rank()) {
    // Longer than any wait of the others: they abort the job first.
    std::this_thread::sleep_for(std::chrono::duration<double>(10 * options.timeout_s + 5));
  }
  // Every collective size fits an MPI count, checked before anything is measured.
  if (world_.size() > 1) {
    for (const std::int64_t bytes : collective_sweep_bytes(options, "cpu", world_.size())) {
      for (const CollectiveKind kind : options.collective_kinds) {
        MpiCollective::call_count(kind, bytes, world_.size());
      }
    }
  }
  Profile profile;
  profile.hardware = options.hardware;
  auto kernels = make_cpu_kernels({0, nullptr, options.attention});

  // Compute: every distinct op, with the executor's kernels. Repetitions are interleaved
  // (repetition 1 of every op, then repetition 2, ...) rather than run op by op: on a
  // shared host the load drifts over the seconds a profile takes, and interleaving spreads
  // that drift over all ops alike instead of charging it to whichever op ran during a busy
  // spell; and an op then starts with the caches holding another op's operands, as it does
  // inside a step, not its own from the repetition before.
  const std::vector<Op> ops = ops_to_measure(workload, kMaxCopyBytes);
  for (std::int64_t i = 0; i < options.warmup; ++i) {
    for (const Op& op : ops) kernels->run(op);
  }
  // The ranks start each round together and then run its ops back to back, as they run the
  // ops of a step: no barrier between two ops (a barrier before every op, where Open MPI
  // yields the core while it waits when oversubscribed, made preemption inside the op
  // more likely than inside a step).
  //
  // A repetition during which another process took the core (an involuntary context
  // switch: the host is shared) is run again, up to kComputeAttempts times: the sample is
  // the op's time on its core. The cpu executor's compute thread blocks between tasks and,
  // freshly woken, is rarely preempted inside one (on a 2-core host at load 4-5 its layer
  // forwards took the sum of the ops' fastest samples), whereas a profile running ops back
  // to back is a CPU hog that the scheduler time-slices with the other load: 40-50% of the
  // samples of a 2 ms GEMM then included a ~8 ms slice of another process. On an idle
  // host no repetition is re-run.
  std::vector<std::vector<double>> samples_s(ops.size());
  std::int64_t reruns = 0;
  std::int64_t disturbed = 0;  // kept although switched out kComputeAttempts times
  for (std::int64_t rep = 0; rep < options.reps; ++rep) {
    world_.barrier();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      double elapsed_s = 0;
      for (int attempt = 0; attempt < kComputeAttempts; ++attempt) {
        const long switches = involuntary_switches();
        const auto start = Clock::now();
        kernels->run(ops[i]);
        elapsed_s = seconds_since(start);
        if (involuntary_switches() == switches) break;
        if (attempt + 1 < kComputeAttempts) {
          ++reruns;
        } else {
          ++disturbed;
        }
      }
      samples_s[i].push_back(elapsed_s);
    }
  }
  const std::vector<double> rerun_counts =
      world_.gather_from_ranks({static_cast<double>(reruns), static_cast<double>(disturbed)});
  // Every rank's own samples (reps x ranks): ranks do not wait for each other between two
  // compute ops of a step -- only at collectives -- so the cost of an op is its time on one
  // rank. (The maximum over ranks would charge every op the worse of two ranks' scheduling
  // noise, which a step does not pay: on a loaded 2-core host it made the predicted
  // compute 1.7x the measured one.)
  for (std::size_t i = 0; i < ops.size(); ++i) {
    profile.compute.push_back(
        ComputeEntry{ops[i].signature(), ops[i], world_.gather_from_ranks(samples_s[i])});
  }

  // Collectives over all ranks of the job.
  const int ranks = world_.size();
  std::string collective_note = "measured";
  if (ranks > 1) {
    const CommGroup group{ranks, ranks_per_node(options)};
    const std::vector<std::int64_t> sizes = collective_sweep_bytes(options, "cpu", ranks);
    for (const CollectiveKind kind : options.collective_kinds) {
      CollectiveSweep sweep{kind, group, {}};
      for (const std::int64_t bytes : sizes) {
        MpiCollective collective(world_, kind, bytes, ranks, world_.comm());
        sweep.points.push_back(
            CollectivePoint{bytes, time_on_all_ranks(options, [&] { collective.run(); })});
      }
      profile.collectives.push_back(std::move(sweep));
    }
  } else {
    collective_note = "not measured: one rank (run under mpirun -np N for the sweep)";
  }

  std::string contention_note = "defaults: not measured (--no-contention)";
  if (options.measure_contention) {
    contention_note =
        ranks > 1 ? measure_contention(profile.compute, options, *kernels, profile.contention)
                  : "defaults: not measured (one rank)";
  }
  const std::string comm_beside_compute_note =
      options.measure_contention && ranks > 1
          ? measure_comm_beside_compute(profile.compute, options, profile.contention)
          : "not measured";
  // Copies beside compute need no second rank: measured on one too.
  const std::string copy_beside_compute_note =
      options.measure_contention
          ? measure_copy_beside_compute(profile.compute, options, profile.contention)
          : "not measured (--no-contention)";

  profile.provenance.tool = options.tool;
  profile.provenance.date = options.date;
  profile.provenance.command = options.command;
  profile.provenance.method = "cpu-steady-clock";
  auto& environment = profile.provenance.environment;
  environment["host"] = world_.broadcast(host_name());
  environment["cpu"] = world_.broadcast(cpu_model_name());
  environment["ranks"] = std::to_string(ranks);
  environment["mpi"] = mpi_library_version();
  environment["eigen"] =
      fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  environment["kernels"] = kernels->device();
  environment["collectives"] = collective_note;
  environment["contention"] = contention_note;
  environment["comm_beside_compute"] = comm_beside_compute_note;
  environment["copy_beside_compute"] = copy_beside_compute_note;
  double all_reruns = 0;
  double all_disturbed = 0;
  for (std::size_t r = 0; r + 1 < rerun_counts.size(); r += 2) {
    all_reruns += rerun_counts[r];
    all_disturbed += rerun_counts[r + 1];
  }
  environment["samples"] = fmt::format(
      "compute: {} after {} warm-up on each rank, every rank's samples; {} "
      "re-run after an involuntary context switch, {} kept switched out after {} attempts; "
      "collectives: {}, max over ranks",
      counted(options.reps, "rep"), options.warmup,
      counted(static_cast<std::int64_t>(all_reruns), "repetition"), all_disturbed, kComputeAttempts,
      counted(options.reps, "rep"));
  return profile;
}

// Overlap on CPUs (DESIGN.md "Overlap is not free"): the executor runs collectives on a
// communication thread beside the compute thread, so measure exactly that -- the largest
// GEMM while another thread runs all-gathers, and two all-gathers on two threads at once.
std::string CpuCollector::measure_contention(const std::vector<ComputeEntry>& compute,
                                             const CollectorOptions& options, OpKernels& kernels,
                                             ContentionFactors& factors) {
  if (!world_.thread_multiple()) {
    return "defaults: not measured (MPI library without MPI_THREAD_MULTIPLE)";
  }
  const ComputeEntry* gemm = largest_gemm(compute);
  if (gemm == nullptr) return "defaults: not measured (no GEMM in the workload)";
  const double gemm_alone_s = median_seconds(gemm->samples_s);

  // The all-gather: 4 MiB, whatever the sweep covered -- large enough to be bandwidth-bound
  // on shared memory and to dwarf a thread hand-off (tens of us), small enough to repeat.
  const int ranks = world_.size();
  const std::int64_t bytes = collective_buffer_bytes(4 * kMiB, ranks);
  MPI_Comm comm_a = MPI_COMM_NULL;
  MPI_Comm comm_b = MPI_COMM_NULL;
  collect::check_mpi(MPI_Comm_dup(world_.comm(), &comm_a), "MPI_Comm_dup");
  collect::check_mpi(MPI_Comm_dup(world_.comm(), &comm_b), "MPI_Comm_dup");
  MpiCollective first(world_, CollectiveKind::kAllGather, bytes, ranks, comm_a);
  MpiCollective second(world_, CollectiveKind::kAllGather, bytes, ranks, comm_b);
  const double single_s = median_seconds(time_on_all_ranks(options, [&] { first.run(); }));

  // GEMM beside a stream of all-gathers. Every rank runs the same number of all-gathers
  // (computed from values already maxed over ranks), enough to cover twice the GEMMs.
  const auto gathers = static_cast<std::int64_t>(
      std::max(4.0, std::ceil(2.0 * static_cast<double>(options.reps) * gemm_alone_s / single_s)));
  std::vector<double> with_comm_s;
  {
    std::atomic<bool> comm_running{false};
    world_.barrier();
    std::thread comm_thread([&] {
      comm_running = true;
      for (std::int64_t i = 0; i < gathers; ++i) first.run();
      comm_running = false;
    });
    while (!comm_running) std::this_thread::yield();
    for (std::int64_t rep = 0; rep < options.reps && comm_running; ++rep) {
      const auto start = Clock::now();
      kernels.run(gemm->op);
      const double elapsed_s = seconds_since(start);
      if (comm_running) with_comm_s.push_back(elapsed_s);  // overlapped all the way
    }
    comm_thread.join();
  }
  // Every rank needs overlapped samples; 0 stands for "none" in the max/min reductions.
  const double fewest = -world_.max_over_ranks(-static_cast<double>(with_comm_s.size()));
  // Like gemm_alone_s (every rank's samples), the typical rank: the median of the ranks'
  // medians.
  const double gemm_with_comm_s = median_seconds(
      world_.gather_from_ranks({with_comm_s.empty() ? 0.0 : median_seconds(with_comm_s)}));

  // Two all-gathers at once, on two communicators from two threads. The second thread
  // lives across the repetitions and is handed each one, so no thread start is timed.
  std::mutex mutex;
  std::condition_variable changed;
  std::int64_t requested = 0;  // repetitions handed to the helper (-1: stop)
  std::int64_t finished = 0;   // repetitions it has finished
  std::exception_ptr helper_error;
  std::thread helper([&] {
    std::unique_lock lock(mutex);
    for (std::int64_t done = 0;;) {
      changed.wait(lock, [&] { return requested != done; });
      if (requested < 0) return;
      lock.unlock();
      try {
        second.run();
      } catch (...) {
        helper_error = std::current_exception();
      }
      lock.lock();
      finished = ++done;
      changed.notify_all();
    }
  });
  std::vector<double> pair_samples_s;
  try {
    pair_samples_s = time_on_all_ranks(options, [&] {
      std::int64_t ticket = 0;
      {
        std::lock_guard lock(mutex);
        ticket = ++requested;
      }
      changed.notify_all();
      first.run();
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return finished == ticket; });
    });
  } catch (...) {
    {
      std::lock_guard lock(mutex);
      requested = -1;
    }
    changed.notify_all();
    helper.join();
    throw;
  }
  {
    std::lock_guard lock(mutex);
    requested = -1;
  }
  changed.notify_all();
  helper.join();
  if (helper_error) std::rethrow_exception(helper_error);
  MPI_Comm_free(&comm_a);
  MPI_Comm_free(&comm_b);

  if (fewest < 1) {
    const ContentionFactors defaults;
    factors = contention_from_measurements(1.0, defaults.compute_slowdown_with_comm, single_s,
                                           median_seconds(pair_samples_s));
    return fmt::format(
        "comm_share_efficiency measured with two {} all-gathers; compute_slowdown_with_comm "
        "default (no GEMM repetition overlapped an all-gather on every rank)",
        format_bytes(bytes));
  }
  factors = contention_from_measurements(gemm_alone_s, gemm_with_comm_s, single_s,
                                         median_seconds(pair_samples_s));
  return fmt::format("measured: {} GEMM m={} n={} k={} beside {} all-gathers; two at once",
                     to_string(gemm->op.dtype), gemm->op.gemm.m, gemm->op.gemm.n, gemm->op.gemm.k,
                     format_bytes(bytes));
}

// A reduce-scatter beside compute (the CPU loop's largest error, docs/validation.md): its
// time alone and while another thread of every rank runs the largest GEMM over and over,
// as the cpu executor runs backward compute beside the reduce stream. Their ratio (at
// least 1) is `factors.comm_slowdown_with_compute`: on a few shared cores the
// communication thread, woken between its tests of the collective, competes with the
// compute thread for a core, and Open MPI progresses the collective only in those tests.
std::string CpuCollector::measure_comm_beside_compute(const std::vector<ComputeEntry>& compute,
                                                      const CollectorOptions& options,
                                                      ContentionFactors& factors) {
  if (!world_.thread_multiple()) return "not measured: no MPI_THREAD_MULTIPLE";
  const ComputeEntry* gemm = largest_gemm(compute);
  if (gemm == nullptr) return "not measured: no GEMM in the workload";
  const int ranks = world_.size();
  const std::int64_t bytes = collective_buffer_bytes(4 * kMiB, ranks);
  MPI_Comm comm = MPI_COMM_NULL;
  collect::check_mpi(MPI_Comm_dup(world_.comm(), &comm), "MPI_Comm_dup");
  MpiCollective reduce_scatter(world_, CollectiveKind::kReduceScatter, bytes, ranks, comm);
  const double alone_s = median_seconds(time_on_all_ranks(options, [&] { reduce_scatter.run(); }));

  BackgroundLoop compute_thread(gemm->op, options.attention);
  const std::vector<double> beside_samples_s =
      time_on_all_ranks(options, [&] { reduce_scatter.run(); });
  compute_thread.stop();
  MPI_Comm_free(&comm);
  const double beside_s = median_seconds(beside_samples_s);
  if (alone_s > 0) {
    factors.comm_slowdown_with_compute =
        std::clamp(beside_s / alone_s, 1.0, kMaxCommSlowdownWithCompute);
  }
  return fmt::format(
      "{} reduce-scatter {} alone, {} beside the {} GEMM m={} n={} k={} on another thread "
      "({}): comm_slowdown_with_compute",
      format_bytes(bytes), format_seconds(alone_s), format_seconds(beside_s),
      to_string(gemm->op.dtype), gemm->op.gemm.m, gemm->op.gemm.n, gemm->op.gemm.k,
      slowdown_ratio_text(beside_s / alone_s, kMaxCommSlowdownWithCompute));
}

CpuCollector::AloneBeside CpuCollector::time_alone_and_beside(const Op& timed, const Op& beside,
                                                              const CollectorOptions& options) {
  auto kernels = make_cpu_kernels({0, nullptr, options.attention});
  for (std::int64_t i = 0; i < options.warmup; ++i) kernels->run(timed);
  auto time_reps = [&](std::vector<double>& into) {
    for (std::int64_t rep = 0; rep < options.reps; ++rep) {
      world_.barrier();
      const auto start = Clock::now();
      kernels->run(timed);
      into.push_back(seconds_since(start));
    }
  };
  AloneBeside samples;
  time_reps(samples.alone_s);
  {
    BackgroundLoop other(beside, options.attention);
    time_reps(samples.beside_s);
    other.stop();
  }
  time_reps(samples.alone_s);
  samples.alone_s = world_.gather_from_ranks(samples.alone_s);
  samples.beside_s = world_.gather_from_ranks(samples.beside_s);
  return samples;
}

// Bucket copies beside compute (docs/validation.md: the replays' copies took several times
// their profiled time): the largest bucket copy alone and while another thread of every
// rank runs the largest GEMM over and over, as the cpu executor copies on its
// communication thread beside the compute thread; and that GEMM alone and beside a thread
// copying over and over. Their ratios (at least 1) are `factors.copy_slowdown_with_compute`
// and `factors.compute_slowdown_with_copy`. Each ratio compares samples timed the same
// way (time_alone_and_beside), not the profile's interleaved ones, so that it is the other
// thread's and not the difference of two timing methods.
std::string CpuCollector::measure_copy_beside_compute(const std::vector<ComputeEntry>& compute,
                                                      const CollectorOptions& options,
                                                      ContentionFactors& factors) {
  const ComputeEntry* gemm = largest_gemm(compute);
  const ComputeEntry* copy = largest_bucket_copy(compute);
  if (gemm == nullptr || copy == nullptr) {
    return "not measured: the workload has no GEMM or no bucket copy";
  }
  const AloneBeside copy_samples = time_alone_and_beside(copy->op, gemm->op, options);
  const AloneBeside gemm_samples = time_alone_and_beside(gemm->op, copy->op, options);
  const double copy_alone_s = median_seconds(copy_samples.alone_s);
  const double copy_beside_s = median_seconds(copy_samples.beside_s);
  const double gemm_alone_s = median_seconds(gemm_samples.alone_s);
  const double gemm_beside_s = median_seconds(gemm_samples.beside_s);
  factors.copy_slowdown_with_compute =
      slowdown_from_measurements(copy_alone_s, copy_beside_s, kMaxCopySlowdown);
  factors.compute_slowdown_with_copy =
      slowdown_from_measurements(gemm_alone_s, gemm_beside_s, kMaxCopySlowdown);
  return fmt::format(
      "{} copy {} alone, {} beside the {} GEMM m={} n={} k={} on another thread ({}): "
      "copy_slowdown_with_compute; the GEMM {} alone, {} beside the copy ({}): "
      "compute_slowdown_with_copy",
      format_bytes(copy->op.bytes), format_seconds(copy_alone_s), format_seconds(copy_beside_s),
      to_string(gemm->op.dtype), gemm->op.gemm.m, gemm->op.gemm.n, gemm->op.gemm.k,
      slowdown_ratio_text(copy_beside_s / copy_alone_s, kMaxCopySlowdown),
      format_seconds(gemm_alone_s), format_seconds(gemm_beside_s),
      slowdown_ratio_text(gemm_beside_s / gemm_alone_s, kMaxCopySlowdown));
}

}  // namespace

std::unique_ptr<Collector> make_cpu_collector() { return std::make_unique<CpuCollector>(); }

}  // namespace fsdptune
