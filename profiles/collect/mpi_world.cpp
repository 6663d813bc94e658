#include "mpi_world.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "fsdptune/error.hpp"
#include "fsdptune/polling.hpp"

namespace fsdptune::collect {

void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw_runtime(call, fmt::format("{} failed: {}", call, std::string(text, length)));
}

MpiWorld::MpiWorld() {
  int initialised = 0;
  check_mpi(MPI_Initialized(&initialised), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (initialised == 0) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    initialised_here_ = true;
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiWorld::~MpiWorld() {
  if (!initialised_here_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised == 0) MPI_Finalize();
}

void MpiWorld::wait(MPI_Request& request, const char* call, const char* doing) const {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  poll_until([&] {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done != 0) return true;
    const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s_ > 0 && waited_s > timeout_s_) {
      // As validate's watchdog: every rank's MPI_Abort ends the job (a throw would leave
      // this rank in MPI_Finalize, waiting for the one that stopped).
      std::fprintf(stderr,
                   "fsdptune: error: rank %d: no progress for %.1f s while %s (--timeout %g s): "
                   "a rank stopped responding or a collective hangs\n"
                   "  aborting every rank (MPI_Abort)\n",
                   rank_, waited_s, doing, timeout_s_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
    return false;
  });
}

void MpiWorld::barrier() const {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  wait(request, "MPI_Ibarrier", "waiting for every rank at a barrier");
}

void MpiWorld::max_over_ranks(std::vector<double>& values) const {
  if (size_ == 1 || values.empty()) return;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                           MPI_MAX, MPI_COMM_WORLD, &request),
            "MPI_Iallreduce");
  wait(request, "MPI_Iallreduce", "gathering every rank's samples");
}

double MpiWorld::max_over_ranks(double value) const {
  std::vector<double> values = {value};
  max_over_ranks(values);
  return values[0];
}

std::vector<double> MpiWorld::gather_from_ranks(const std::vector<double>& values) const {
  if (size_ == 1 || values.empty()) return values;
  std::vector<double> all(values.size() * static_cast<std::size_t>(size_));
  const int count = static_cast<int>(values.size());
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(values.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE,
                           MPI_COMM_WORLD, &request),
            "MPI_Iallgather");
  wait(request, "MPI_Iallgather", "gathering every rank's samples");
  return all;
}

std::string MpiWorld::broadcast(const std::string& text) const {
  int length = static_cast<int>(text.size());
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  wait(request, "MPI_Ibcast", "receiving rank 0's environment");
  std::string out = rank_ == 0 ? text : std::string(static_cast<std::size_t>(length), '\0');
  check_mpi(MPI_Ibcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  wait(request, "MPI_Ibcast", "receiving rank 0's environment");
  return out;
}

}  // namespace fsdptune::collect
